// Packed documents end to end (issue 14): a sequence packed from documents that the end-of-document
// token separates, with the data loader's document ids (--doc-mask) and, where asked, its restarted
// positions (--doc-positions restart), gives the loss and gradients of its documents run one by one —
// on the unchunked model and on the FPDT pipeline: chunked, batched, P = 1 and 2, offloaded to RAM and
// disk, recomputed, and in a forward-only (validation) pass.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "fpdt/data/data_loader.h"
#include "fpdt/kernels/ops.h"
#include "pipeline/pipeline_testing.h"
#include "testing.h"

namespace fpdt::train {
namespace {

using pipeline::RunSpec;
using pipeline::Result;

constexpr int32_t kEnd = 60;  // the end-of-document token (the last id of tiny()'s vocabulary of 61)

// B rows of S tokens cut from random token streams in which kEnd ends a document about every
// `mean_document` tokens, through the loader's own row functions; row 1 (when B > 1) is one document
// longer than the row (no kEnd: the part the row holds, from position 0).
struct Packed {
  int B;
  int64_t S;
  std::vector<int32_t> inputs, targets, doc_ids, positions;  // (B, S)
  Packed(Rng& rng, int B, int64_t S, int64_t mean_document) : B(B), S(S) {
    const size_t n = static_cast<size_t>(B * S);
    inputs.resize(n);
    targets.resize(n);
    doc_ids.resize(n);
    positions.resize(n);
    std::vector<int32_t> window(static_cast<size_t>(S + 1));
    for (int b = 0; b < B; ++b) {
      for (int32_t& token : window)
        token = b != 1 && rng.below(static_cast<uint64_t>(mean_document)) == 0 ? kEnd
                                                                               : static_cast<int32_t>(rng.below(kEnd));
      const size_t row = static_cast<size_t>(b * S);
      data::fill_inputs(&inputs[row], S, window, 0);
      data::fill_targets(&targets[row], S, window);
      data::fill_documents(&doc_ids[row], &positions[row], S, window, kEnd);
    }
  }
  // The batch as the trainer hands it to the model: document ids, and positions when restarted.
  model::Batch batch(bool restart) const {
    model::Batch batch{B, S, inputs.data(), targets.data(), nullptr};
    batch.doc_ids = doc_ids.data();
    if (restart) batch.positions = positions.data();
    return batch;
  }
};

// Each document of each row alone, through the unchunked model (B = 1, T = its length) at positions
// 0.. (restart) or at its place in the row: the loss and the gradients, summed.
Result documents_one_by_one(const model::ModelConfig& config, const Packed& packed, bool restart, double grad_scale,
                            uint64_t seed) {
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  model::Transformer model(config, *backend, seed);
  Result result;
  std::vector<int32_t> global(static_cast<size_t>(packed.S));
  std::iota(global.begin(), global.end(), 0);
  int documents = 0;
  for (int b = 0; b < packed.B; ++b) {
    const int64_t row = b * packed.S;
    for (int64_t begin = 0, end = 0; begin < packed.S; begin = end, ++documents) {
      while (end < packed.S && packed.doc_ids[row + end] == packed.doc_ids[row + begin]) ++end;
      model::Batch one{1, end - begin, &packed.inputs[row + begin], &packed.targets[row + begin], nullptr};
      if (!restart) one.positions = &global[begin];
      const model::LossStats stats = model.forward_backward(one, grad_scale);
      result.loss_sum += stats.loss_sum;
      result.count += stats.count;
    }
  }
  std::printf("[ packed   ] %d documents in %d rows of %lld tokens\n", documents, packed.B,
              static_cast<long long>(packed.S));
  result.grads.assign(model.grads().data(), model.grads().data() + model.grads().numel());
  return result;
}

// Same maths in another order (documents one by one vs masked blocks merged by LSE, per-rank partial
// sums): fp32 rounding only, 1e-5 relative (the bar). Forward-only results carry no gradients.
void expect_equal(const Result& got, const Result& want, const std::string& what) {
  EXPECT_EQ(got.count, want.count) << what;
  const double loss_error = std::abs(got.loss_sum - want.loss_sum) / want.loss_sum;
  EXPECT_LE(loss_error, 1e-5) << what;
  if (got.grads.empty()) {
    std::printf("[ error    ] %-44s loss %.2e\n", what.c_str(), loss_error);
    return;
  }
  const double grad_error = testing::relative_error(got.grads, want.grads);
  std::printf("[ error    ] %-44s loss %.2e, gradients %.2e\n", what.c_str(), loss_error, grad_error);
  EXPECT_LE(grad_error, 1e-5) << what;
}

struct Case {
  const char* name;
  model::Family family;
  bool restart;  // --doc-positions restart
  int64_t S;
};

class PackedDocuments : public ::testing::TestWithParam<Case> {};

TEST_P(PackedDocuments, EqualTheirDocumentsRunOneByOne) {
  const Case& c = GetParam();
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const model::ModelConfig config = pipeline::tiny(c.family, 4, c.family == model::Family::llama ? 2 : 4);
  const Packed packed(rng, 3, c.S, 9);
  const model::Batch batch = packed.batch(c.restart);
  const double scale = 1.0 / model::counted_targets(batch.targets, nullptr, batch.B * batch.T);
  const Result want = documents_one_by_one(config, packed, c.restart, scale, seed);

  {  // unchunked, the whole packed batch at once
    auto backend = kernels::make_backend(kernels::BackendKind::cpu);
    model::Transformer model(config, *backend, seed);
    const model::LossStats stats = model.forward_backward(batch, scale);
    expect_equal(Result{stats.loss_sum, stats.count,
                        std::vector<float>(model.grads().data(), model.grads().data() + model.grads().numel()), {}},
                 want, "unchunked");
  }
  for (const int ranks : {1, 2}) {
    RunSpec chunked;
    chunked.chunks = 4;  // chunks of ⌈S / 4P⌉·P tokens: documents cross chunk boundaries
    for (const char* offload : {"ram", "disk:/tmp"}) {
      chunked.offload = pipeline::parse_offload(offload);
      expect_equal(pipeline::run_pipeline(config, chunked, ranks, batch, scale, seed), want,
                   "P " + std::to_string(ranks) + ", 4 chunks, offload " + offload);
    }
    chunked.recompute = pipeline::Recompute::layer;
    expect_equal(pipeline::run_pipeline(config, chunked, ranks, batch, scale, seed), want,
                 "P " + std::to_string(ranks) + ", 4 chunks, disk, recompute layer");
    // A validation pass: the forward only.
    expect_equal(pipeline::run_pipeline(config, chunked, ranks, batch, scale, seed, pipeline::Pass::forward),
                 Result{want.loss_sum, want.count, {}, {}}, "P " + std::to_string(ranks) + ", forward only");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Train, PackedDocuments,
    ::testing::Values(Case{"llama_global_positions", model::Family::llama, false, 48},
                      Case{"llama_restarted_positions", model::Family::llama, true, 50},  // padded to the chunks
                      Case{"gpt_global_positions", model::Family::gpt, false, 50},
                      Case{"gpt_restarted_positions", model::Family::gpt, true, 48}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fpdt::train

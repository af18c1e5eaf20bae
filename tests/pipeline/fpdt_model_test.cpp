// FPDT invariances: the chunked, offloaded, sequence-parallel pipeline computes the same loss and
// gradients as the unchunked single-rank model (within fp32 rounding of a different summation
// order), and offload on/off and recompute none/layer give bitwise the same results.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "fpdt/comm/communicator.h"
#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/ops.h"
#include "fpdt/model/transformer.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

model::ModelConfig tiny(model::Family family, int heads, int kv_heads) {
  model::ModelConfig config = model::preset(family == model::Family::llama ? "llama-tiny" : "gpt-tiny");
  config.vocab_size = 61;
  config.hidden = 32;
  config.heads = heads;
  config.kv_heads = kv_heads;
  config.head_dim = 8;
  config.rotary_dim = 8;
  config.ffn_hidden = 48;
  config.layers = 2;
  if (family == model::Family::gpt) config.hidden = heads * config.head_dim;
  return config;
}

struct Data {
  std::vector<int32_t> tokens, targets;
  model::Batch batch;
  Data(Rng& rng, int B, int64_t S, int V) {
    for (int64_t n = 0; n < B * S; ++n) {
      tokens.push_back(static_cast<int32_t>(rng.below(V)));
      targets.push_back(rng.uniform() < 0.1 ? kernels::kIgnoreIndex : static_cast<int32_t>(rng.below(V)));
    }
    batch = model::Batch{B, S, tokens.data(), targets.data(), nullptr};
  }
};

struct Result {
  double loss_sum = 0.0, count = 0.0;
  std::vector<float> grads;
};

// Runs the pipeline on P thread ranks; returns the loss and gradients summed over ranks.
Result run_pipeline(const model::ModelConfig& config, const PipelineConfig& pipeline, int ranks, const Data& data,
                    uint64_t seed) {
  auto backend = kernels::make_backend("cpu");
  const double count = model::counted_targets(data.batch.targets, nullptr, data.batch.B * data.batch.T);
  Result result;
  std::mutex mutex;
  comm::run_ranks(ranks, [&](comm::Communicator& comm) {
    FpdtModel model(config, *backend, comm, pipeline, seed);
    const model::LossStats stats = model.forward_backward(data.batch, 1.0 / count);
    double sums[2] = {stats.loss_sum, stats.count};
    comm.all_reduce_sum(sums, 2);
    comm.all_reduce_sum(model.grads().data(), static_cast<size_t>(model.grads().numel()));
    if (comm.rank() != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    result.loss_sum = sums[0];
    result.count = sums[1];
    result.grads.assign(model.grads().data(), model.grads().data() + model.grads().numel());
  });
  return result;
}

Result run_unchunked(const model::ModelConfig& config, const Data& data, uint64_t seed) {
  auto backend = kernels::make_backend("cpu");
  model::Transformer model(config, *backend, seed);
  const model::LossStats stats = model.forward_backward(data.batch);
  return Result{stats.loss_sum, stats.count,
                std::vector<float>(model.grads().data(), model.grads().data() + model.grads().numel())};
}

struct Case {
  const char* name;
  model::Family family;
  int heads, kv_heads, ranks, chunks, B;
  int64_t S;
};

class Invariance : public ::testing::TestWithParam<Case> {};

TEST_P(Invariance, ChunkedShardedOffloadedEqualsUnchunked) {
  const Case& c = GetParam();
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const model::ModelConfig config = tiny(c.family, c.heads, c.kv_heads);
  const Data data(rng, c.B, c.S, config.vocab_size);
  const Result want = run_unchunked(config, data, seed);

  PipelineConfig pipeline;
  pipeline.chunks = c.chunks;
  pipeline.offload.kind = OffloadKind::none;
  const Result got = run_pipeline(config, pipeline, c.ranks, data, seed);
  // Same maths, different summation order (chunked LSE merges, per-rank partial weight gradients
  // summed by the all-reduce): fp32 rounding only, 1e-5 relative (the bar).
  EXPECT_NEAR(got.loss_sum / got.count, want.loss_sum / want.count, 1e-5 * want.loss_sum / want.count);
  EXPECT_DOUBLE_EQ(got.count, want.count);
  const double grad_error = testing::relative_error(got.grads, want.grads);
  std::printf("[ error    ] loss %.2e, gradients %.2e\n",
              std::abs(got.loss_sum / got.count - want.loss_sum / want.count) / (want.loss_sum / want.count), grad_error);
  EXPECT_LE(grad_error, 1e-5);

  // Offload to RAM or disk and recompute the layer: bitwise the same as everything resident.
  for (const char* offload : {"ram", "disk:/tmp"}) {
    PipelineConfig other = pipeline;
    other.offload = parse_offload(offload);
    const Result offloaded = run_pipeline(config, other, c.ranks, data, seed);
    EXPECT_EQ(offloaded.loss_sum, got.loss_sum) << offload;
    EXPECT_EQ(0, std::memcmp(offloaded.grads.data(), got.grads.data(), got.grads.size() * sizeof(float))) << offload;
  }
  PipelineConfig recompute = pipeline;
  recompute.recompute = Recompute::layer;
  const Result recomputed = run_pipeline(config, recompute, c.ranks, data, seed);
  EXPECT_EQ(recomputed.loss_sum, got.loss_sum);
  EXPECT_EQ(0, std::memcmp(recomputed.grads.data(), got.grads.data(), got.grads.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(
    Pipeline, Invariance,
    ::testing::Values(Case{"llama_mha_p1_u1", model::Family::llama, 4, 4, 1, 1, 1, 24},
                      Case{"llama_gqa_p1_u2", model::Family::llama, 4, 2, 1, 2, 2, 29},
                      Case{"llama_gqa_p1_u8", model::Family::llama, 4, 2, 1, 8, 1, 61},
                      Case{"llama_gqa_p2_u4", model::Family::llama, 4, 2, 2, 4, 2, 50},
                      Case{"llama_gqa_p4_u2_replicated", model::Family::llama, 4, 2, 4, 2, 1, 45},
                      Case{"llama_mha_p4_u4", model::Family::llama, 4, 4, 4, 4, 2, 64},
                      Case{"gpt_p2_u2", model::Family::gpt, 4, 4, 2, 2, 2, 37},
                      Case{"gpt_p1_u4", model::Family::gpt, 4, 4, 1, 4, 1, 30}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Ulysses, UnsupportedHeadCountsAreRefusedBeforeCompute) {
  EXPECT_THROW(make_head_sharding(6, 6, 4), Error);   // 6 heads over 4 ranks
  EXPECT_THROW(make_head_sharding(12, 6, 4), Error);  // 6 kv heads: neither split nor replicated over 4
  EXPECT_TRUE(make_head_sharding(8, 2, 4).kv_replicated);
  EXPECT_FALSE(make_head_sharding(8, 4, 4).kv_replicated);
}

}  // namespace
}  // namespace fpdt::pipeline

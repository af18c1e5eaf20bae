// Issue 46 under mpirun (ctest runs it with -np 1, 2 and 4): the sp = P pipeline over the MPI
// communicator — uneven head splits, per-rank all_to_all_v counts, kv gradients summed over the ranks
// that hold a head — equals the sp = 1 pipeline for fresh random head layouts of every HeadCase (the
// threads twin is fpdt_model_test's AnyHeadLayoutOnPRanksEqualsOneRank). Rank 0 draws the seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/mpi_testing.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/ops.h"
#include "fpdt/model/parameters.h"
#include "fpdt/model/transformer.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "pipeline/pipeline_testing.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

struct Sums {
  double loss_sum = 0.0, count = 0.0;
  std::vector<float> grads;
};

// The pipeline on `sp` (every rank of it), its loss and gradient of the mean loss summed over the ranks.
Sums run_on(comm::Communicator& sp, const model::ModelConfig& config, const RunSpec& run, const model::Batch& batch,
            double grad_scale, uint64_t seed) {
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  FpdtModel model(config, *backend, sp, run, seed);
  const model::LossStats stats = model.forward_backward(batch, grad_scale);
  Sums sums{stats.loss_sum, stats.count, {}};
  double both[2] = {sums.loss_sum, sums.count};
  sp.all_reduce_sum(both, 2);
  sp.all_reduce_sum(model.grads().data(), static_cast<size_t>(model.grads().numel()));
  sums.loss_sum = both[0];
  sums.count = both[1];
  sums.grads.assign(model.grads().data(), model.grads().data() + model.grads().numel());
  return sums;
}

// The parameter tensors whose gradient's relative error exceeds `bound`, " name error" each: where a
// failed draw went wrong (seen once in a full suite run, 2026-12-07: 5.8e-3 against 1.8e-5, and not again
// in 36 runs with the same or fresh seeds, some beside busy loops or with every copy delayed 3 ms).
std::string tensors_past(const model::ModelConfig& config, const std::vector<float>& got,
                         const std::vector<float>& want, double bound) {
  std::string past;
  const model::ParameterLayout layout(config);
  for (const model::ParameterInfo& tensor : layout.tensors()) {
    const size_t offset = static_cast<size_t>(tensor.offset), n = static_cast<size_t>(tensor.numel());
    const double error = testing::relative_error(got.data() + offset, want.data() + offset, n);
    if (error <= bound) continue;
    char text[32];
    std::snprintf(text, sizeof text, " %.2e", error);
    past += " " + tensor.name + text;
  }
  return past;
}

// Same maths in another order on both sides (the chunk plan's LSE merges, per-rank partial sums, the kv
// gradients' sum over ranks): fp32 rounding only, bounded by fp32_bound of the model's sums (both sides'
// errors counted), as in fpdt_model_test.
TEST(UnevenHeads, AnyHeadLayoutOverMpiEqualsOneRank) {
  comm::Communicator& world = comm::testing::world();
  const uint64_t seed = comm::testing::agreed_seed(world);
  Rng rng(seed);
  const std::unique_ptr<comm::Communicator> alone = comm::make_local();
  const int draws = 30;
  double worst_loss = 0.0, worst_grad = 0.0;  // error / bound
  for (int draw = 0; draw < draws; ++draw) {
    const HeadDraw layout =
        draw_heads(rng, static_cast<HeadCase>(draw % static_cast<int>(HeadCase::count)), world.size());
    const model::ModelConfig config = tiny(model::Family::llama, layout.heads, layout.kv_heads);
    const int B = 1 + static_cast<int>(rng.below(2));
    const int64_t S = 2 * layout.ranks + static_cast<int64_t>(rng.below(40));
    std::vector<int32_t> tokens, targets;
    for (int64_t n = 0; n < B * S; ++n) {
      tokens.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(config.vocab_size))));
      targets.push_back(rng.uniform() < 0.1 ? kernels::kIgnoreIndex
                                            : static_cast<int32_t>(rng.below(static_cast<uint64_t>(config.vocab_size))));
    }
    const model::Batch batch{B, S, tokens.data(), targets.data(), nullptr};
    const double grad_scale = 1.0 / model::counted_targets(batch.targets, nullptr, B * S);
    RunSpec run;
    run.chunks = 1 + static_cast<int>(rng.below(3));
    const char* offload = draw % 2 == 0 ? "none" : "ram";
    run.offload = parse_offload(offload);
    const Sums got = run_on(world, config, run, batch, grad_scale, seed);
    const Sums want = run_on(*alone, config, run, batch, grad_scale, seed);
    const double loss_bound = testing::fp32_bound(testing::transformer_loss_reordering(config, B * S, S, want.count));
    const double grad_bound = testing::fp32_bound(testing::transformer_reordering(config, B * S, S, true));
    const double want_mean = want.loss_sum / want.count;
    const double loss_error = std::abs(got.loss_sum / got.count - want_mean) / want_mean;
    const double grad_error = testing::relative_error(got.grads, want.grads);
    if (world.rank() == 0)
      std::printf("[ draw %2d  ] Hq %2d Hkv %2d P %d B %d S %3lld u %d: loss %.2e (bound %.2e), gradients %.2e (bound "
                  "%.2e)\n",
                  draw, layout.heads, layout.kv_heads, layout.ranks, B, static_cast<long long>(S), run.chunks, loss_error,
                  loss_bound, grad_error, grad_bound);
    EXPECT_DOUBLE_EQ(got.count, want.count);
    EXPECT_LE(loss_error, loss_bound) << "draw " << draw;
    EXPECT_LE(grad_error, grad_bound) << "draw " << draw << " (chunks " << run.chunks << ", offload " << offload
                                      << "), tensors past the bound:"
                                      << tensors_past(config, got.grads, want.grads, grad_bound);
    worst_loss = std::max(worst_loss, loss_error / loss_bound);
    worst_grad = std::max(worst_grad, grad_error / grad_bound);
  }
  if (world.rank() == 0)
    std::printf("[ error    ] %d draws on %d ranks: worst error / bound: loss %.3f, gradients %.3f\n", draws, world.size(),
                worst_loss, worst_grad);
}

}  // namespace
}  // namespace fpdt::pipeline

// Issue 46: uneven Ulysses head splits cost what the dry run and `fpdt plan` say, rank by rank. The dry
// run reports every sequence-parallel rank's chunk arena and store (TrainResult::sp_ranks); a real run of
// the same shape on P thread ranks allocates exactly those bytes on each rank, and `fpdt plan` reports the
// largest rank's peaks. Shapes: Qwen2.5-7B's heads (28 q, 4 kv) over 8 ranks and Qwen2.5-14B's (40, 8)
// over 16 — neither split is even — on a scaled-down model of the same head counts.
#include <gtest/gtest.h>

#include <mutex>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/config.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/plan/plan.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/train/trainer.h"
#include "plan/head_split_models.h"
#include "testing.h"

namespace fpdt::testing {
namespace {

struct HeadShape {
  const char* like;  // the model whose head counts these are
  int heads, kv_heads, sp;
};

TEST(HeadSplit, DryRunReportsEveryRanksBytesAsARealRunAllocatesThem) {
  const uint64_t seed = fresh_seed();
  Rng rng(seed);
  for (const HeadShape& shape : {HeadShape{"Qwen2.5-7B", 28, 4, 8}, HeadShape{"Qwen2.5-14B", 40, 8, 16}}) {
    SCOPED_TRACE(shape.like);
    const TempDir dir;
    const int P = shape.sp;
    train::TrainSettings s;
    s.run.model = write_head_split_model(dir.file("config.json"), shape.heads, shape.kv_heads);
    s.out_dir = dir.file("run");
    s.run.sp = P;
    s.run.chunk_tokens = 16 * P;  // c = 16 tokens a rank: buffers past one transfer block, so the ranks differ
    s.run.batch_size = 1 + static_cast<int64_t>(rng.below(2));
    s.run.seq_tokens = s.run.chunk_tokens * (1 + static_cast<int64_t>(rng.below(3))) - static_cast<int64_t>(rng.below(P));
    s.run.offload = pipeline::OffloadConfig{rng.below(2) == 0 ? pipeline::OffloadKind::ram : pipeline::OffloadKind::none, ""};
    s.run.recompute = rng.below(2) == 0 ? pipeline::Recompute::none : pipeline::Recompute::layer;
    s.dry_run = true;
    s.run.threads = 1;
    s.peak_gflops = 10;  // nothing measured
    const std::unique_ptr<comm::Communicator> alone = comm::make_local();
    MemoryTiers::instance().reset_peak(Tier::compute);  // the peaks of the shape before are not this one's
    MemoryTiers::instance().reset_peak(Tier::offload);
    ::testing::internal::CaptureStdout();
    const train::TrainResult dry = train::train(s, *alone);
    ::testing::internal::GetCapturedStdout();
    ASSERT_EQ(dry.sp_ranks.size(), static_cast<size_t>(P));

    // The real run: each rank lays out its step (the only allocations of a step, fpdt_model.h) in turn, the
    // others waiting, so the tiers' counters (one per process) see one rank at a time; then all compute it.
    struct Measured {
      size_t compute_bytes = 0, offload_bytes = 0;
    };
    std::vector<Measured> measured(static_cast<size_t>(P));
    const model::ModelConfig config = model::resolve_model(s.run.model);
    auto backend = kernels::make_backend(kernels::BackendKind::cpu);
    std::vector<int32_t> tokens(static_cast<size_t>(s.run.batch_size * s.run.seq_tokens)), targets(tokens.size());
    for (size_t n = 0; n < tokens.size(); ++n) {
      tokens[n] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(config.vocab_size)));
      targets[n] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(config.vocab_size)));
    }
    const model::Batch batch{static_cast<int>(s.run.batch_size), s.run.seq_tokens, tokens.data(), targets.data(), nullptr};
    std::mutex mutex;
    double loss_sum = 0;
    comm::run_ranks(P, [&](comm::Communicator& sp) {
      pipeline::FpdtModel model(config, *backend, sp, s.run, seed);
      for (int turn = 0; turn < P; ++turn) {
        sp.barrier();
        if (sp.rank() != turn) continue;
        const size_t compute = MemoryTiers::instance().usage(Tier::compute).active_bytes;
        const size_t offload = MemoryTiers::instance().usage(Tier::offload).active_bytes;
        model.reserve(s.run.seq_tokens, static_cast<int>(s.run.batch_size));
        measured[static_cast<size_t>(turn)] = {MemoryTiers::instance().usage(Tier::compute).active_bytes - compute,
                                               MemoryTiers::instance().usage(Tier::offload).active_bytes - offload};
      }
      sp.barrier();
      double loss = model.forward_backward(batch, 1.0).loss_sum;
      sp.all_reduce_sum(&loss, 1);
      std::lock_guard<std::mutex> lock(mutex);
      loss_sum = loss;
    });
    EXPECT_TRUE(std::isfinite(loss_sum));
    const bool resident = s.run.offload.kind == pipeline::OffloadKind::none;
    for (int r = 0; r < P; ++r) {
      const train::TrainResult::SpRank& reported = dry.sp_ranks[static_cast<size_t>(r)];
      const Measured& real = measured[static_cast<size_t>(r)];
      std::printf("[ rank %2d  ] %s over %d: %d q heads, %d kv slots: dry run arena %zu + store %zu, real run %zu "
                  "compute + %zu offload\n",
                  r, shape.like, P, reported.layout.q_heads, reported.layout.kv_slots, reported.layout.arena_bytes,
                  reported.layout.store_bytes, real.compute_bytes, real.offload_bytes);
      EXPECT_EQ(reported.layout.rank, r);
      EXPECT_EQ(real.compute_bytes, reported.layout.arena_bytes + (resident ? reported.layout.store_bytes : 0)) << r;
      EXPECT_EQ(real.offload_bytes, resident ? 0 : reported.layout.store_bytes) << r;
    }
    // An uneven split is seen as one: ranks of ⌈Hq/P⌉ and of ⌊Hq/P⌋ heads, laid out with different bytes.
    EXPECT_NE(dry.sp_ranks.front().layout.q_heads, dry.sp_ranks.back().layout.q_heads);
    EXPECT_NE(dry.sp_ranks.front().layout.arena_bytes, dry.sp_ranks.back().layout.arena_bytes);

    // `fpdt plan` of the same run: the largest rank's peaks, to the byte.
    plan::PlanConfig planned;
    planned.model = config;
    planned.run = s.run;
    planned.run.mode = plan::Mode::fpdt;
    planned.run.chunks = 0;
    const plan::PlanResult result = plan::make_plan(planned, plan::hardware_preset("cpu"));
    std::vector<pipeline::RankLayout> layouts;
    for (const train::TrainResult::SpRank& rank : dry.sp_ranks) layouts.push_back(rank.layout);
    const train::TrainResult::SpRank& largest = dry.sp_ranks[static_cast<size_t>(pipeline::largest_rank(layouts))];
    EXPECT_EQ(result.compute_peak.bytes, static_cast<double>(largest.compute_peak_bytes));
    EXPECT_EQ(result.offload_peak.bytes, static_cast<double>(largest.offload_peak_bytes));
    EXPECT_DOUBLE_EQ(result.shape.imbalance, static_cast<double>((shape.heads + P - 1) / P) * P / shape.heads);
  }
}

}  // namespace
}  // namespace fpdt::testing

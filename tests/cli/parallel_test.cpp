// Sequence × data parallelism in the trainer, over thread ranks: 5 optimizer steps with P = 2 and 4
// (GQA split and replicated), sp 2 × dp 2 and dp 2 (B = 1 and 2), end at the weights of the single-rank run within
// 1e-5 relative, on a sequence length P does not divide; the bytes each rank sends per step are
// the closed form of the Ulysses all-to-alls; and the non-finite guard decides alike on every rank.
#include <gtest/gtest.h>

#include <mutex>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/model/parameters.h"
#include "fpdt/tensor/safetensors.h"
#include "fpdt/train/trainer.h"
#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

struct ParallelRun {
  std::vector<float> weights;        // final model.safetensors, all tensors concatenated
  std::vector<double> losses;        // per step
  uint64_t alltoall_bytes = 0;       // rank 0, last step
};

train::TrainSettings five_steps(const TinySetup& setup, const std::string& out, int sp, int dp, int64_t batch,
                               int64_t seq, const std::string& recompute) {
  train::TrainSettings s = setup.settings(out, 5, sp, dp);
  s.run.batch_size = batch;
  s.run.seq_tokens = seq;
  s.run.recompute = pipeline::parse_recompute(recompute);
  return s;
}

// Trains 5 steps on sp × dp thread ranks, each replica on `batch` sequences of `seq` tokens.
ParallelRun train_on_threads(const TinySetup& setup, const std::string& out, int sp, int dp, int64_t batch,
                             int64_t seq, const std::string& recompute) {
  const train::TrainSettings s = five_steps(setup, out, sp, dp, batch, seq, recompute);
  ParallelRun run;
  std::mutex mutex;
  comm::run_ranks(sp * dp, [&](comm::Communicator& world) {
    const train::TrainResult result = train::train(s, world);
    if (world.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      run.alltoall_bytes = result.alltoall_bytes_per_step;
    }
  });
  run.weights = checkpoint_weights(out + "/step_5");
  return run;
}

TEST(Parallel, SequenceAndDataParallelRunsMatchTheSingleRankRun) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());  // 4 heads, 2 kv heads: P = 2 splits kv, P = 4 replicates
  const int64_t seq = 30;                    // not a multiple of 4 (nor of the chunk): padded
  // The single-rank runs see the same global batches: dp replicas of 1 sequence = 1 rank of dp.
  const ParallelRun single_b2 = train_on_threads(setup, dir.file("b2"), 1, 1, 2, seq, "none");
  const ParallelRun single_b1 = train_on_threads(setup, dir.file("b1"), 1, 1, 1, seq, "none");
  for (const auto& [sp, dp] : std::vector<std::pair<int, int>>{{2, 1}, {4, 1}, {2, 2}, {1, 2}}) {
    const ParallelRun& single = dp == 2 ? single_b2 : single_b1;
    const ParallelRun parallel = train_on_threads(
        setup, dir.file("p" + std::to_string(sp) + "x" + std::to_string(dp)), sp, dp, 1, seq, "none");
    // fp32 rounding of a different summation order (sharded partial sums, all-reduce), compounded
    // over 5 AdamW steps: 1e-5 relative, the bar.
    const double error = relative_error(parallel.weights, single.weights);
    std::printf("[ error    ] sp %d x dp %d: weights after 5 steps %.2e\n", sp, dp, error);
    EXPECT_LE(error, 1e-5) << "sp " << sp << " dp " << dp;
  }
}

TEST(Parallel, BytesSentPerStepAreTheClosedForm) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const model::ModelConfig config = model::load_hf_config(setup.config_path);
  for (const int sp : {2, 4})
    for (const std::string recompute : {"none", "layer"}) {
      const int64_t seq = 30;
      const ParallelRun run = train_on_threads(setup, dir.file("b" + std::to_string(sp) + recompute), sp, 1, 2, seq,
                                               recompute);
      // Per layer and sequence the forward sends (2·Hq + 2·kv_send)·D·(P−1)/P elements per local
      // token (q, k, v out; the output back); backward sends as much again (dO out; dq, dk, dv back)
      // and --recompute layer re-runs the forward. Local tokens: the padded sequence over P.
      const pipeline::ChunkPlan plan = pipeline::make_chunk_plan(seq, sp, 0, 0, 2);
      const pipeline::HeadSharding sharding = pipeline::make_head_sharding(config.heads, config.kv_heads, sp, 0);
      const double per_token = sharding.forward_elements_per_token(config.head_dim);
      const double passes = recompute == "layer" ? 3.0 : 2.0;
      const double expected = passes * 2 /*B*/ * config.layers * plan.local_tokens() * per_token * sizeof(float);
      EXPECT_EQ(static_cast<double>(run.alltoall_bytes), expected) << "sp " << sp << " recompute " << recompute;
    }
}

}  // namespace
}  // namespace fpdt::testing

namespace fpdt::testing {
namespace {

TEST(Parallel, EveryRankSkipsTheSameStepsAndStopsTogether) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  train::TrainSettings s = five_steps(setup, dir.file("run"), 2, 2, 1, 30, "none");
  s.fault.nan_grad_from_step = 2;  // rank 0's gradient in steps 2, 3 and 4 (the limit, 3 in a row)
  s.fault.nan_grad_steps = 3;
  std::vector<std::string> errors(4);
  comm::run_ranks(4, [&](comm::Communicator& world) {
    try {
      train::train(s, world);
    } catch (const Error& error) {
      errors[static_cast<size_t>(world.rank())] = error.what();  // no rank waits for another: all stop here
    }
  });
  for (const std::string& error : errors) {
    expect_contains(error, {"[train]", "not finite in 3 steps in a row (2..4", "the weights are those of step 1"});
    EXPECT_EQ(error, errors[0]);
  }
}

}  // namespace
}  // namespace fpdt::testing

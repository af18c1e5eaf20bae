// `fpdt plan` and `fpdt train --dry-run` agree on every run they are given, by construction: both cut
// the sequence with the run spec's one chunk rule (pipeline/run_spec.h run_chunk_plan) and count the
// pipeline's one memory table. Over a grid of (S, P, C, u) — fresh random draws plus the edges (S not
// divisible by the chunk or the ranks, C longer than S, C not a multiple of P, P dividing neither the heads
// nor the kv heads (uneven head splits, issue 46), more ranks than heads, u large, tiny S) — both accept or
// both refuse, and where both accept they lay out the same chunks and count the same compute and offload
// peaks, to the byte: the plan's are the largest rank's, the dry run reports every rank's. Both entry points run in this process
// (plan::make_plan, train::train with --dry-run: nothing is allocated), each case in milliseconds.
#include <gtest/gtest.h>

#include <optional>

#include "fpdt/base/error.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/plan/plan.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/train/trainer.h"
#include "plan/head_split_models.h"
#include "testing.h"

namespace fpdt::testing {
namespace {

constexpr const char* kModel = "llama-demo";  // 8 query heads, 4 kv heads: P ∈ {1, 2, 4, 8} splits them evenly
// A second model's heads, written to the grid's folder: 8 q heads reading 2 kv heads, where P = 3 gives rank 1
// the most bytes (q heads 3-5 read kv heads 0 and 1 in runs of 1 and 2: 3 kv slots; rank 0 holds 1).
constexpr int kSecondHeads = 8, kSecondKvHeads = 2;

struct Case {
  int64_t seq_tokens;    // S
  int sp;                // P
  int64_t chunk_tokens;  // C (0: cut into u chunks)
  int chunks;            // u, when C is 0
  int64_t batch = 1;
  pipeline::OffloadKind offload = pipeline::OffloadKind::ram;
  pipeline::Recompute recompute = pipeline::Recompute::none;
  bool second_model = false;  // kSecondHeads / kSecondKvHeads instead of kModel
};

std::string describe(const Case& c) {
  return "S " + std::to_string(c.seq_tokens) + ", P " + std::to_string(c.sp) + ", C " + std::to_string(c.chunk_tokens) +
         ", u " + std::to_string(c.chunks) + ", B " + std::to_string(c.batch) + ", offload " + pipeline::spelling(c.offload) +
         ", recompute " + pipeline::spelling(c.recompute) + (c.second_model ? ", 8 q / 2 kv heads" : "");
}

// What a command made of a case: its chunks and tier peaks, or its refusal.
struct Outcome {
  std::optional<std::string> refusal;
  pipeline::ChunkPlan chunks;
  double compute_peak_bytes = 0, offload_peak_bytes = 0;
};

Outcome plan_outcome(const Case& c, const std::string& second_model) {
  plan::PlanConfig config;
  config.model = model::resolve_model(c.second_model ? second_model : kModel);
  config.run.seq_tokens = c.seq_tokens;
  config.run.sp = c.sp;
  config.run.batch_size = c.batch;
  config.run.chunk_tokens = c.chunk_tokens;
  config.run.chunks = c.chunk_tokens > 0 ? 0 : c.chunks;
  config.run.mode = plan::Mode::fpdt;
  config.run.recompute = c.recompute;
  config.run.offload.kind = c.offload;
  config.run.zero = 0;
  config.run.precision = plan::Precision::fp32;
  Outcome outcome;
  try {
    const plan::PlanResult result = plan::make_plan(config, plan::hardware_preset("cpu"));
    outcome.chunks = result.shape.chunk_plan;
    outcome.compute_peak_bytes = result.compute_peak.bytes;
    outcome.offload_peak_bytes = result.offload_peak.bytes;
  } catch (const Error& error) {
    outcome.refusal = error.what();
  }
  return outcome;
}

Outcome dry_run_outcome(const Case& c, const std::string& out_dir, const std::string& second_model) {
  train::TrainSettings s;
  s.run.model = c.second_model ? second_model : kModel;
  s.out_dir = out_dir;
  s.run.seq_tokens = c.seq_tokens;
  s.run.sp = c.sp;
  s.run.batch_size = c.batch;
  s.run.chunk_tokens = c.chunk_tokens;
  s.run.chunks = c.chunk_tokens > 0 ? 1 : c.chunks;  // train's --chunks is ≥ 1, unread when C is given
  s.run.offload = pipeline::OffloadConfig{c.offload, ""};
  s.run.recompute = c.recompute;
  s.dry_run = true;
  s.run.threads = 1;
  s.peak_gflops = 10;  // nothing measured
  MemoryTiers::instance().reset_peak(Tier::compute);
  MemoryTiers::instance().reset_peak(Tier::offload);
  const std::unique_ptr<comm::Communicator> world = comm::make_local();  // a dry run lays out rank 0 of sp
  Outcome outcome;
  ::testing::internal::CaptureStdout();  // the start-up table of every case
  try {
    const train::TrainResult result = train::train(s, *world);
    outcome.chunks = result.chunk_plan;
    // Rank 0 laid out; the largest rank's peaks from the table of every rank (rank 0's row is what was laid out).
    std::vector<pipeline::RankLayout> layouts;
    for (const train::TrainResult::SpRank& rank : result.sp_ranks) layouts.push_back(rank.layout);
    EXPECT_EQ(result.sp_ranks.size(), static_cast<size_t>(c.sp));
    EXPECT_EQ(result.sp_ranks.at(0).compute_peak_bytes, result.compute_peak_bytes);
    EXPECT_EQ(result.sp_ranks.at(0).offload_peak_bytes, result.offload_peak_bytes);
    const train::TrainResult::SpRank& largest = result.sp_ranks.at(static_cast<size_t>(pipeline::largest_rank(layouts)));
    outcome.compute_peak_bytes = static_cast<double>(largest.compute_peak_bytes);
    outcome.offload_peak_bytes = static_cast<double>(largest.offload_peak_bytes);
  } catch (const Error& error) {
    outcome.refusal = error.what();
  }
  ::testing::internal::GetCapturedStdout();
  return outcome;
}

// The edges, each on purpose.
std::vector<Case> edge_cases() {
  using pipeline::OffloadKind;
  using pipeline::Recompute;
  return {
      {1000, 2, 96, 0},                      // the issue's: 11 x 96 tokens, padding 56
      {1000, 2, 96, 0, 2, OffloadKind::none, Recompute::layer},
      {1001, 4, 256, 0},                     // S divisible by neither C nor P
      {1001, 4, 0, 3},
      {1000, 1, 48, 0},                      // C not dividing S
      {64, 1, 8192, 0},                      // C > S: refused
      {100, 2, 102, 0},                      // C past S rounded up to P: refused
      {100, 2, 100, 0},                      // C = S: one chunk
      {99, 2, 100, 0},                       // C = S rounded up to P: one chunk, padding 1
      {1024, 4, 6, 0},                       // C not a multiple of P: refused
      {1024, 2, 3, 0},
      {1024, 3, 0, 2},                       // P dividing neither the 8 heads nor the 4 kv heads: 3, 3, 2 heads
      {1024, 5, 0, 2},
      {1024, 6, 96, 0},
      {1024, 7, 0, 3},
      {1024, 3, 0, 2, 1, OffloadKind::ram, Recompute::none, true},   // rank 1 the largest (kSecondKvHeads)
      {1024, 3, 96, 0, 2, OffloadKind::none, Recompute::layer, true},
      {1000, 6, 0, 4, 1, OffloadKind::ram, Recompute::layer, true},
      {1024, 16, 0, 1},                      // more ranks than heads: refused
      {1024, 9, 0, 1, 1, OffloadKind::ram, Recompute::none, true},
      {4096, 8, 512, 0},                     // P = 8 > 4 kv heads: kv heads replicated
      {64, 1, 0, 1000},                      // u large: chunks without tokens, refused
      {4096, 1, 0, 96},                      // u large and filled
      {300, 2, 0, 150},                      // one token per rank and chunk
      {301, 2, 0, 150},                      // chunks of 4 tokens: 76 of the 150 hold any, refused
      {1, 1, 0, 1},                          // tiny S
      {1, 2, 0, 1},
      {1, 2, 2, 0},
      {2, 4, 4, 0},
      {3, 1, 1, 0},
      {3, 1, 0, 3},
      {3, 1, 0, 4},                          // more chunks than tokens: refused
  };
}

// Fresh draws: S up to 6000, P splitting the heads evenly or not (one draw in three of the second model), C
// a multiple of P (sometimes not) or u chunks (sometimes more than fill), at most ~100 chunks so each dry
// run's schedule stays small.
std::vector<Case> random_cases(Rng& rng, int count) {
  const int ranks[] = {1, 1, 2, 2, 4, 4, 8, 8, 3, 5, 6, 7};
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i) {
    Case c{};
    c.seq_tokens = 1 + static_cast<int64_t>(rng.below(6000));
    c.sp = ranks[rng.below(std::size(ranks))];
    const int64_t per_rank = (c.seq_tokens + c.sp - 1) / c.sp;
    if (rng.below(2) == 0) {
      const int64_t fewest_chunks_of_p = std::max<int64_t>(1, per_rank / 100);  // C ≥ P · this keeps u ≤ ~100
      c.chunk_tokens = c.sp * (fewest_chunks_of_p + static_cast<int64_t>(rng.below(static_cast<uint64_t>(per_rank + per_rank / 4 + 1))));
      if (rng.below(10) == 0) c.chunk_tokens += 1;  // not a multiple of P (unless P = 1)
      c.chunks = 0;
    } else {
      // Mostly chunks that all fill; one draw in eight up to as many chunks as a rank has tokens.
      const int64_t most = rng.below(8) == 0 ? per_rank : std::max<int64_t>(1, per_rank / 2);
      c.chunks = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(std::min<int64_t>(most, 100))));
    }
    c.batch = 1 + static_cast<int64_t>(rng.below(2));
    c.offload = rng.below(2) == 0 ? pipeline::OffloadKind::ram : pipeline::OffloadKind::none;
    c.recompute = rng.below(2) == 0 ? pipeline::Recompute::none : pipeline::Recompute::layer;
    c.second_model = rng.below(3) == 0;
    cases.push_back(c);
  }
  return cases;
}

TEST(PlanAndDryRun, AcceptTheSameRunsAndLayThemOutAlike) {
  Rng rng(fresh_seed());
  std::vector<Case> cases = edge_cases();
  const std::vector<Case> drawn = random_cases(rng, 200);
  cases.insert(cases.end(), drawn.begin(), drawn.end());
  ASSERT_GE(cases.size(), 200u);
  const TempDir dir;
  const std::string second_model = write_head_split_model(dir.file("config.json"), kSecondHeads, kSecondKvHeads);
  int accepted = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Outcome planned = plan_outcome(c, second_model);
    const Outcome laid_out = dry_run_outcome(c, dir.file("run"), second_model);
    ASSERT_EQ(planned.refusal.has_value(), laid_out.refusal.has_value())
        << "plan: " << planned.refusal.value_or("accepted") << "\ntrain --dry-run: " << laid_out.refusal.value_or("accepted");
    if (planned.refusal) {  // a user's mistake, said as one: never an internal error
      EXPECT_EQ(planned.refusal->find("[internal]"), std::string::npos) << *planned.refusal;
      EXPECT_EQ(laid_out.refusal->find("[internal]"), std::string::npos) << *laid_out.refusal;
      continue;
    }
    ++accepted;
    EXPECT_EQ(planned.chunks.chunks, laid_out.chunks.chunks);
    EXPECT_EQ(planned.chunks.chunk_tokens, laid_out.chunks.chunk_tokens);
    EXPECT_EQ(planned.chunks.local_chunk_tokens, laid_out.chunks.local_chunk_tokens);
    EXPECT_EQ(planned.chunks.padded_tokens, laid_out.chunks.padded_tokens);
    // One memory table counted twice: equal to the byte.
    EXPECT_EQ(planned.compute_peak_bytes, laid_out.compute_peak_bytes);
    EXPECT_EQ(planned.offload_peak_bytes, laid_out.offload_peak_bytes);
  }
  // The grid is not mostly refusals (nor all acceptances: the edges hold both).
  EXPECT_GT(accepted, static_cast<int>(cases.size()) / 3);
  EXPECT_LT(accepted, static_cast<int>(cases.size()));
  std::printf("[ grid     ] %zu cases, %d accepted by both, %zu refused by both\n", cases.size(), accepted,
              cases.size() - static_cast<size_t>(accepted));
}

}  // namespace
}  // namespace fpdt::testing

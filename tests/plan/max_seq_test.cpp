// The longest-sequence search (`fpdt plan --max-seq`, issue 45): a chunk the search chose itself that does not
// fit even once is halved until one does (the answer is never "S 0" while a smaller chunk fits), and the rows
// of the other modes leave out what only fpdt can plan (an offloaded optimizer) instead of refusing the whole
// command.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/fpdt_program.h"
#include "fpdt/plan/plan.h"
#include "fpdt/plan/report.h"

namespace fpdt::plan {
namespace {

// Llama-3-8B on 4 ranks with ZeRO-3 and the optimizer in host RAM: the compute tier holds the chunk
// buffers beside a few GiB of model states, so the chunk decides what fits.
PlanConfig llama8b_offloaded_optimizer() {
  PlanConfig config;
  config.model = model::preset("llama3-8b");
  config.run.sp = 4;
  config.run.zero = 3;
  config.run.offload_optimizer = true;
  return config;
}

double compute_peak_at_one_chunk(PlanConfig config, int64_t chunk_tokens, const Hardware& hardware) {
  config.run.seq_tokens = config.run.chunk_tokens = chunk_tokens;
  return make_plan(config, hardware).compute_peak.bytes;
}

TEST(MaxSeq, HalvesAChunkThatDoesNotFitOnceAndSaysSo) {
  Hardware hardware = hardware_preset("A100-80GB");
  const PlanConfig config = llama8b_offloaded_optimizer();
  const MaxSeqResult roomy = search_max_seq(config, hardware);
  const int64_t hiding = roomy.chunk_tokens;  // the smallest chunk that hides the prefetch
  ASSERT_GT(roomy.seq_tokens, 0);
  ASSERT_EQ(roomy.halved_from_tokens, 0);
  // A compute tier, drawn at random, between the peaks of one chunk of half that size and of that size.
  const double half_peak = compute_peak_at_one_chunk(config, hiding / 2, hardware);
  const double hiding_peak = compute_peak_at_one_chunk(config, hiding, hardware);
  ASSERT_LT(half_peak, hiding_peak);
  Rng rng(testing::fresh_seed());
  hardware.compute_bytes = hardware.reserved_bytes + rng.uniform(half_peak, hiding_peak);

  const MaxSeqResult tight = search_max_seq(config, hardware);
  EXPECT_EQ(tight.halved_from_tokens, hiding);
  EXPECT_EQ(tight.chunk_tokens, hiding / 2);
  ASSERT_GT(tight.seq_tokens, 0);
  // What it found is a plan that fits, whose copies are not hidden.
  PlanConfig found = config;
  found.run.seq_tokens = tight.seq_tokens;
  found.run.chunk_tokens = tight.chunk_tokens;
  const PlanResult plan = make_plan(found, hardware);
  EXPECT_TRUE(plan.fits);
  EXPECT_FALSE(plan.prefetch.hides);
  EXPECT_NE(format_max_seq_text(tight, {tight}).find("did not fit the compute tier even once"), std::string::npos);

  // A compute tier too small for any chunk: S 0, and the fixed part that leaves no room is named.
  hardware.compute_bytes = hardware.reserved_bytes + compute_peak_at_one_chunk(config, config.run.sp, hardware) / 2;
  const MaxSeqResult none = search_max_seq(config, hardware);
  EXPECT_EQ(none.seq_tokens, 0);
  EXPECT_EQ(none.halved_from_tokens, 0);
  EXPECT_EQ(none.chunk_tokens, hiding);
  EXPECT_EQ(none.bound, "compute tier");
}

TEST(MaxSeq, NamesTheModelStatesWhenNothingFits) {
  // ZeRO-3 without the optimizer offloaded: fpdt's model states (the pipeline's own ZeRO slots included)
  // alone exceed 40 GiB, while the Ulysses row (DeepSpeed's accounting) fits 4K.
  PlanConfig config = llama8b_offloaded_optimizer();
  config.run.offload_optimizer = false;
  Hardware hardware = hardware_preset("A100-80GB");
  hardware.compute_bytes = 40.0 * 1073741824.0;
  const MaxSeqResult fpdt = search_max_seq(config, hardware);
  ASSERT_EQ(fpdt.seq_tokens, 0);
  EXPECT_GT(fpdt.model_state_bytes, fpdt.compute_capacity_bytes);
  EXPECT_EQ(fpdt.compute_capacity_bytes, hardware.compute_bytes - hardware.reserved_bytes);
  EXPECT_NE(format_max_seq_text(fpdt, {fpdt}).find("the model states alone take"), std::string::npos);
}

TEST(MaxSeq, OtherModesRowsLeaveOutTheOffloadedOptimizer) {
  // The command: refused before ("an offloaded optimizer is planned for --mode fpdt ...") because
  // the Ulysses row inherited --offload-optimizer.
  const testing::ProgramResult result =
      testing::run_fpdt("plan --model llama3-8b --sp 4 --compute-mem 40GiB --offload-optimizer ram --max-seq --json");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  const nlohmann::json json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json["config"]["mode"], "fpdt");
  EXPECT_GT(json["max_seq"]["seq_tokens"].get<int64_t>(), 0);
  ASSERT_GE(json["max_seq_by_mode"].size(), 3u);
  EXPECT_EQ(json["max_seq_by_mode"][0]["mode"], "ulysses");
  EXPECT_GT(json["max_seq_by_mode"][0]["seq_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(json["max_seq_by_mode"][2]["seq_tokens"], json["max_seq"]["seq_tokens"]);
  // Asked of ulysses itself, an offloaded optimizer is still refused.
  testing::expect_one_clear_error(
      testing::run_fpdt("plan --model llama3-8b --sp 4 --mode ulysses --offload-optimizer ram --max-seq"),
      {"[plan]", "offloaded optimizer", "--mode fpdt"});
}

}  // namespace
}  // namespace fpdt::plan

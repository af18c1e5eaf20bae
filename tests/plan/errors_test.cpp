// Bad input to the planner gets one clear fpdt::Error ("[module] what; hint: ..."), never a crash or
// a silent nonsense plan: unknown presets and names, heads that do not split over the ranks, a chunk
// that does not divide, negative or zero sizes, impossible mode combinations, bad hardware numbers.
#include <gtest/gtest.h>

#include "fpdt/plan/plan.h"
#include "testing.h"

namespace fpdt::plan {
namespace {

using fpdt::testing::error_message;
using fpdt::testing::expect_contains;

PlanConfig valid_config() {
  PlanConfig config;
  config.model = model::preset("llama3-8b");
  config.run.seq_tokens = 1 << 20;
  config.run.sp = 4;
  config.run.mode = Mode::fpdt;
  return config;
}

std::string plan_error(const PlanConfig& config, const Hardware& hardware = hardware_preset("A100-80GB")) {
  return error_message([&] { make_plan(config, hardware); });
}

TEST(PlanErrors, ValidConfigurationPlans) {
  EXPECT_TRUE(make_plan(valid_config(), hardware_preset("A100-80GB")).fits);
}

TEST(PlanErrors, UnknownPresetsAndNames) {
  expect_contains(error_message([] { model::resolve_model("gpt-5t"); }), {"[model]", "unknown model preset 'gpt-5t'",
                                                                          "hint:", "llama3-8b"});
  expect_contains(error_message([] { hardware_preset("B200"); }),
                  {"[plan]", "unknown hardware preset 'B200'", "hint:", "A100-80GB", "cpu"});
  // The run spec's words (pipeline/run_spec.h), which the plan reads as `fpdt train` does.
  using namespace pipeline;
  expect_contains(error_message([] { parse_mode("megatron-sp"); }),
                  {"[run spec]", "unknown mode", "fpdt, ulysses or fpdt-reference"});
  expect_contains(error_message([] { parse_offload("nvme"); }),
                  {"[run spec]", "unknown offload tier", "none, ram, disk or disk:DIR"});
  expect_contains(error_message([] { parse_recompute("selective"); }), {"[run spec]", "none or layer"});
  expect_contains(error_message([] { parse_precision("fp8"); }), {"[run spec]", "fp32 or bf16"});
  expect_contains(error_message([] { parse_positions("alibi"); }), {"[plan]", "unknown positions"});
  // Every spelling parses back to its value; disk:DIR is the disk tier in DIR.
  for (const std::string& word : mode_spellings()) EXPECT_EQ(pipeline::spelling(parse_mode(word)), word);
  for (const std::string& word : recompute_spellings()) EXPECT_EQ(pipeline::spelling(parse_recompute(word)), word);
  for (const std::string& word : offload_spellings()) EXPECT_EQ(pipeline::spelling(parse_offload(word)), word);
  for (const std::string& word : positions_spellings()) EXPECT_EQ(positions_name(parse_positions(word)), word);
  for (const std::string& word : precision_spellings()) EXPECT_EQ(pipeline::spelling(parse_precision(word)), word);
  EXPECT_EQ(parse_offload("disk:/scratch").kind, OffloadKind::disk);
  EXPECT_EQ(parse_offload("disk:/scratch").directory, "/scratch");
  EXPECT_EQ(parse_offload("disk").directory, "");
}

// Issue 46: any --sp up to the head count is planned (uneven splits cost their imbalance); more ranks than
// heads is refused, naming --sp and the head count.
TEST(PlanErrors, MoreRanksThanHeadsAreRefusedAndEveryOtherSplitPlanned) {
  PlanConfig config = valid_config();
  config.model = model::preset("gpt-30b");  // 56 heads
  config.positions = Positions::rope;
  config.run.sp = 16;                       // 4 or 3 heads a rank
  config.run.seq_tokens = 1 << 20;
  const PlanResult uneven = make_plan(config, hardware_preset("A100-80GB"));
  EXPECT_DOUBLE_EQ(uneven.shape.imbalance, 4.0 / 3.5);
  config.model = with_heads(config.model, 64);  // 4 heads a rank: balanced, and less attention time
  const PlanResult even = make_plan(config, hardware_preset("A100-80GB"));
  EXPECT_DOUBLE_EQ(even.shape.imbalance, 1.0);
  EXPECT_LT(even.flops.attention / even.flops.model, uneven.flops.attention / uneven.flops.model);
  config.model = model::preset("gpt-30b");
  config.run.sp = 64;
  config.run.seq_tokens = 1 << 20;
  expect_contains(plan_error(config), {"[plan]", "--sp 64", "56 attention heads", "hint:", "at most 56", "--heads"});
  // kv heads neither split over nor dividing the ranks: planned too (kv slots, pipeline/ulysses.h).
  model::ModelConfig odd = model::preset("llama-demo");
  odd.hidden = 192;
  odd.heads = 12;
  odd.kv_heads = 6;
  odd.head_dim = 16;
  odd.rotary_dim = 16;
  config = valid_config();
  config.model = odd;
  config.run.sp = 4;
  config.run.seq_tokens = 8 * 1024;
  EXPECT_NO_THROW(make_plan(config, hardware_preset("A100-80GB")));
  expect_contains(error_message([] { with_heads(model::preset("gpt-30b"), 100); }),
                  {"[plan]", "not divisible by 100 heads"});
}

// The chunks are the run spec's (pipeline::run_chunk_plan), as `fpdt train` cuts them: a chunk that does
// not divide the sequence pads its last chunk; one that does not split over the ranks, or is longer
// than the sequence, is refused.
TEST(PlanErrors, ChunksAreCutAsTrainCutsThem) {
  PlanConfig config = valid_config();
  config.run.seq_tokens = 1 << 20;
  config.run.chunk_tokens = 3 * 65536;  // does not divide 2^20: 6 chunks, the last one padded
  const PlanShape padded = make_plan(config, hardware_preset("A100-80GB")).shape;
  EXPECT_EQ(padded.u, 6);
  EXPECT_EQ(padded.chunk_plan.padded_tokens - padded.S, 6 * 3 * 65536 - (1 << 20));
  EXPECT_EQ(padded.T, padded.chunk_plan.padded_tokens / 4);
  config.run.chunk_tokens = 65538;  // not a multiple of --sp 4
  expect_contains(plan_error(config), {"[plan]", "--chunk-tokens 65538 does not split over --sp 4 ranks", "hint:"});
  config.run.chunk_tokens = 2 << 20;  // longer than the sequence
  expect_contains(plan_error(config), {"[plan]", "--chunk-tokens 2097152 is longer than the sequence of 1048576"});
  config.run.chunk_tokens = 0;
  config.run.chunks = 3;  // u chunks instead of C tokens: ⌈2^20 / 12⌉ per rank and chunk
  EXPECT_EQ(make_plan(config, hardware_preset("A100-80GB")).shape.C, 4 * ((1 << 20) / 12 + 1));
  config.run.mode = Mode::fpdt_reference;
  config.run.chunks = 0;  // the reference's 64K
  config.run.seq_tokens = 96 * 1024;
  EXPECT_EQ(make_plan(config, hardware_preset("A100-80GB")).shape.u, 2);
  config.run.mode = Mode::ulysses;  // one chunk of the whole sequence
  EXPECT_EQ(make_plan(config, hardware_preset("A100-80GB")).shape.chunk_plan.chunks, 1);
}

TEST(PlanErrors, NegativeAndZeroSizes) {
  PlanConfig config = valid_config();
  config.run.seq_tokens = -5;
  expect_contains(plan_error(config), {"[plan]", "sequence length (--seq) must be positive, got -5"});
  config = valid_config();
  config.run.sp = 0;
  expect_contains(plan_error(config), {"[plan]", "--sp", "must be positive, got 0"});
  config = valid_config();
  config.run.dp = -2;
  expect_contains(plan_error(config), {"[plan]", "--dp", "must be positive, got -2"});
  config = valid_config();
  config.run.batch_size = 0;
  expect_contains(plan_error(config), {"[plan]", "--batch", "must be positive"});
  config = valid_config();
  config.run.chunk_tokens = -65536;
  expect_contains(plan_error(config), {"[plan]", "chunk size (--chunk-tokens) must be positive, got -65536"});
  config = valid_config();
  config.run.zero = 4;
  expect_contains(plan_error(config), {"[plan]", "ZeRO stage must be 0, 1, 2 or 3, got 4"});
  config = valid_config();
  config.run.seq_tokens = 1000001;  // not divisible by --sp 4: padded, as a training run pads it
  EXPECT_EQ(make_plan(config, hardware_preset("A100-80GB")).shape.chunk_plan.padded_tokens % 4, 0);
  Hardware broken = hardware_preset("A100-80GB");
  broken.host_link_bytes_per_s = -1;
  expect_contains(plan_error(valid_config(), broken), {"[plan]", "host link bandwidth", "must be positive"});
  broken = hardware_preset("A100-80GB");
  broken.compute_bytes = 1e9;  // less than the 2 GiB the runtime keeps
  expect_contains(plan_error(valid_config(), broken), {"[plan]", "reserve leaves no compute memory"});
  expect_contains(error_message([] { search_max_seq([] {
                    PlanConfig config = valid_config();
                    config.run.sp = -1;
                    return config;
                  }(), hardware_preset("A100-80GB")); }),
                  {"[plan]", "--sp", "must be positive"});
}

TEST(PlanErrors, CombinationsAModeDoesNotHave) {
  PlanConfig config = valid_config();
  config.run.mode = Mode::fpdt_reference;
  config.run.recompute = Recompute::none;
  expect_contains(plan_error(config), {"[plan]", "always re-runs each layer", "hint:", "--mode fpdt"});
  config.run.recompute = Recompute::layer;
  config.run.offload.kind = OffloadKind::disk;
  expect_contains(plan_error(config), {"[plan]", "host memory only"});
  config.run.mode = Mode::ulysses;
  expect_contains(plan_error(config), {"[plan]", "not on disk"});
  config = valid_config();
  config.model = model::preset("gpt-2.7b");  // a learned table of 4M positions
  config.run.seq_tokens = int64_t{8} << 20;
  expect_contains(plan_error(config), {"[plan]", "exceeds the 4194304 learned positions", "--positions rope"});
}

}  // namespace
}  // namespace fpdt::plan

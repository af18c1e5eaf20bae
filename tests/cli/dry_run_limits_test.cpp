// Dry runs of lengths no machine holds answer with their layout, in little memory, and no size in them
// wraps: the bookkeeping grows with the chunks, not with their square (--seq 64G in 1M chunks is 65,536
// chunks, a schedule of billions of steps), a traffic beyond 64-bit bytes is said to be so, and a batch
// the pipeline cannot count, a step beyond 64-bit bytes, sp x dp beyond a job's count are refused naming
// the options — never "[internal]".
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

const std::string kGoldenLlama = std::string(FPDT_SOURCE_DIR) + "/tests/golden/llama";
constexpr int64_t kGiB = int64_t{1} << 30;

// `fpdt <args>` in an address space of 1 GiB (a dry run that grew with chunks² cannot answer in it), killed
// after 120 s should it hang (a guard, not a timing).
ProgramResult run_in_one_gib(const std::string& args) {
  return run_command("ulimit -v " + std::to_string(kGiB / 1024) + "; timeout -s KILL 120 " + fpdt_binary() + " " + args);
}

// The dry run's JSON line (its last line that is a JSON object).
nlohmann::json dry_run_json(const ProgramResult& result) {
  const size_t begin = result.output.rfind("\n{");
  return nlohmann::json::parse(result.output.substr(begin == std::string::npos ? 0 : begin + 1));
}

void expect_laid_out(const ProgramResult& result) {
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_EQ(result.output.find("[internal]"), std::string::npos) << result.output;
  EXPECT_LT(dry_run_json(result)["peak_rss_bytes"].get<int64_t>(), kGiB) << result.output;
}

TEST(DryRunLimits, SixtyFourGigatokensInMegatokenChunksAnswerInLittleMemory) {
  const ProgramResult result = run_in_one_gib("train --seq 64G --chunk-tokens 1M --offload ram --dry-run");
  expect_laid_out(result);
  const nlohmann::json json = dry_run_json(result);
  EXPECT_EQ(json["seq"], int64_t{64} << 30);
  // A step of the demo model at 64G moves more bytes than 64 bits count: said so, no wrapped figure.
  EXPECT_TRUE(json["offload_read_bytes"].is_null()) << result.output;
  EXPECT_NE(result.output.find("offload traffic per step beyond 16 EiB"), std::string::npos) << result.output;
  // At 4G it fits: counted.
  const ProgramResult shorter = run_in_one_gib("train --seq 4G --chunk-tokens 1M --offload ram --dry-run");
  expect_laid_out(shorter);
  EXPECT_GT(dry_run_json(shorter)["offload_read_bytes"].get<uint64_t>(), 0u) << shorter.output;
  // And eval's forward at 64G.
  expect_laid_out(run_in_one_gib("eval --checkpoint " + kGoldenLlama + " --seq 64G --chunk-tokens 1M --offload ram --dry-run"));
}

TEST(DryRunLimits, ATeratokenSequenceIsLaidOutInTrainAndEval) {
  expect_laid_out(run_in_one_gib("train --model " + kGoldenLlama + " --seq 1T --chunk-tokens 1M --dry-run"));
  expect_laid_out(run_in_one_gib("eval --checkpoint " + kGoldenLlama + " --seq 1T --chunk-tokens 1M --dry-run"));
  // --grad-accum micro-batches of the same traffic: multiplied, checked.
  const ProgramResult accumulated =
      run_in_one_gib("train --seq 64K --chunk-tokens 1K --offload ram --grad-accum 1152921504606846976 --dry-run");
  expect_laid_out(accumulated);
  EXPECT_TRUE(dry_run_json(accumulated)["offload_written_bytes"].is_null()) << accumulated.output;
}

TEST(DryRunLimits, ProductsBeyondTheirTypesAreRefusedNamingTheOptions) {
  // 2^40 sequences a micro-batch: more than the pipeline counts (it reported a compute peak of 1.95 MiB).
  for (const std::string& command :
       {std::string("train --seq 64 --dry-run"), "eval --checkpoint " + kGoldenLlama + " --seq 64 --dry-run"})
    expect_one_clear_error(run_in_one_gib(command + " --batch 1099511627776"),
                           {"[cli]", "--batch must be", "2147483647", "got '1099511627776'"});
  // A step whose buffers take more bytes than 64 bits count.
  expect_one_clear_error(run_in_one_gib("train --seq 1T --chunk-tokens 1M --batch 2147483647 --dry-run"),
                         {"[train]", "--seq 1099511627776 is too long for 'llama-demo' at --batch 2147483647", "64-bit",
                          "hint: lower --seq"});
  expect_one_clear_error(
      run_in_one_gib("eval --checkpoint " + kGoldenLlama + " --seq 1T --chunk-tokens 1M --batch 2147483647 --dry-run"),
      {"[eval]", "--seq 1099511627776 is too long", "at --batch 2147483647", "64-bit"});
  // The longest --seq int64 holds: its chunk count was (S + C − 1) / C, wrapped to "fill 0 chunks".
  expect_one_clear_error(run_in_one_gib("train --model llama-tiny --seq 9223372036854775807 --dry-run"),
                         {"[train]", "--seq 9223372036854775807 is too long for 'llama-tiny'", "64-bit"});
  // A passkey grid whose prompts of a length cannot be held (they ran for minutes with no bound).
  expect_one_clear_error(run_in_one_gib("eval --checkpoint " + kGoldenLlama + " --seq 1024 --passkey-trials 1000000000"),
                         {"[eval]", "--passkey-trials 1000000000 x --passkey-depths 5 prompts of 1024 tokens",
                          "hint: lower --passkey-trials"});
  // A world of sp x dp ranks beyond an int.
  expect_one_clear_error(run_in_one_gib("train --sp 65536 --dp 65536 --dry-run"),
                         {"[train]", "--sp 65536 x --dp 65536 ranks", "hint:"});
}

}  // namespace
}  // namespace fpdt::testing

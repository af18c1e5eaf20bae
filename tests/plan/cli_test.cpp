// `fpdt plan` end to end: --json is one JSON object with the searched longest sequence and the three
// modes side by side, the table prints, --help works, and bad input is one clear error line with
// exit status 1. Skipped while the program does not dispatch `plan` yet (src/cli/main.cpp).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/fpdt_program.h"

namespace fpdt::testing {
namespace {

TEST(PlanCli, HelpListsTheOptions) {
  const ProgramResult result = run_fpdt("plan --help");
  EXPECT_EQ(result.exit_status, 0) << result.output;
  EXPECT_NE(result.output.find("usage: fpdt plan"), std::string::npos) << result.output;
}

TEST(PlanCli, JsonMaxSeqShowsAllModes) {
  const ProgramResult result =
      run_fpdt("plan --model llama3-8b --sp 4 --mode fpdt-reference --max-seq --json");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  const nlohmann::json json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json["config"]["mode"], "fpdt-reference");
  EXPECT_EQ(json["hardware"]["name"], "A100-80GB");
  EXPECT_EQ(json["max_seq"]["mode"], "fpdt-reference");
  EXPECT_EQ(json["config"]["seq_tokens"], json["max_seq"]["seq_tokens"]);
  EXPECT_TRUE(json["memory"]["fits"].get<bool>());
  // ulysses, fpdt-reference, fpdt with host RAM like the reference, fpdt with the node's disk.
  ASSERT_EQ(json["max_seq_by_mode"].size(), 4u);
  EXPECT_EQ(json["max_seq_by_mode"][1]["seq_tokens"], json["max_seq"]["seq_tokens"]);
  EXPECT_EQ(json["max_seq_by_mode"][2]["mode"], "fpdt");
  EXPECT_EQ(json["max_seq_by_mode"][2]["offload"], "ram");
  EXPECT_GT(json["max_seq_by_mode"][2]["seq_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(json["max_seq_by_mode"][3]["offload"], "disk");
  EXPECT_GE(json["max_seq_by_mode"][3]["seq_tokens"].get<int64_t>(), json["max_seq"]["seq_tokens"].get<int64_t>());
  for (const char* key : {"flops", "traffic", "prefetch", "time"}) EXPECT_TRUE(json.contains(key)) << key;
}

TEST(PlanCli, TableAndOverrides) {
  const ProgramResult result = run_fpdt(
      "plan --model gpt-2.7b --positions rope --sp 2 --seq 1M --hardware h100-80gb --host-mem 64GiB "
      "--host-link-gbps 12.5 --peak-tflops 500 --network-gbps 100");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  expect_contains(result.output, {"H100-80GB", "host 64.00 GiB", "host link 12.5 GB/s", "500.0 TFLOP/s",
                                  "network 100 GB/s", "memory per rank", "layer inputs x", "prefetch",
                                  "MFU"});
  EXPECT_EQ(run_fpdt("plan --help").exit_status, 0);
}

TEST(PlanCli, BadInputIsOneClearError) {
  struct Case {
    const char* args;
    const char* expected;
  };
  const Case cases[] = {
      {"plan --model gpt-99b", "unknown model preset 'gpt-99b'"},
      {"plan --hardware tpu-v5", "unknown hardware preset 'tpu-v5'"},
      {"plan --model gpt-30b --positions rope --sp 16", "not divisible by --sp 16"},
      {"plan --model llama3-8b --sp 4 --seq 1M --chunk 48K", "does not divide the sequence"},
      {"plan --seq -1M", "must be positive"},
      {"plan --compute-mem -3GiB", "--compute-mem expects a size"},
      {"plan --host-link-gbps -1", "--host-link-gbps must be positive"},
      {"plan --mode megatron", "unknown mode 'megatron'"},
  };
  for (const Case& bad : cases) {
    const ProgramResult result = run_fpdt(bad.args);
    EXPECT_EQ(result.exit_status, 1) << bad.args << "\n" << result.output;
    EXPECT_NE(result.output.find(bad.expected), std::string::npos) << bad.args << "\n" << result.output;
    EXPECT_EQ(result.output.find("terminate called"), std::string::npos) << result.output;
  }
}

}  // namespace
}  // namespace fpdt::testing

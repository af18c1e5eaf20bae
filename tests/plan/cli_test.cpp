// `fpdt plan` end to end: --json is one JSON object with the searched longest sequence and the three
// modes side by side, the table prints, --help works, the options `fpdt train` shares are spelled and
// read as train reads them, and bad input is one clear error line with exit status 1.
#include <gtest/gtest.h>

#include <cmath>

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

TEST(PlanCli, CpuPresetMeasuresThisMachine) {
  // fp32: the FMA peak and sgemm's share of it; bf16: the bf16 unit this CPU has (or its FMAs).
  for (const char* precision : {"fp32", "bf16"}) {
    const ProgramResult result =
        run_fpdt(std::string("plan --model llama-tiny --seq 8K --hardware cpu --json --precision ") + precision);
    ASSERT_EQ(result.exit_status, 0) << result.output;
    const nlohmann::json hw = nlohmann::json::parse(result.output)["hardware"];
    const std::string measured = hw["rates_measured"].get<std::string>();
    EXPECT_NE(measured.find(std::string("1024^3 ") + precision + " GEMM"), std::string::npos) << measured;
    const bool named_unit = measured.rfind("AMX-BF16 peak", 0) == 0 || measured.rfind("AVX512-BF16 peak", 0) == 0 ||
                            measured.rfind("fp32 FMA peak", 0) == 0;
    EXPECT_TRUE(named_unit) << measured;
    if (std::string(precision) == "fp32") {
      EXPECT_EQ(measured.rfind("fp32 FMA peak", 0), 0u) << measured;
    }
    // Any CPU this runs on computes at more than 1 GFLOP/s, and a GEMM sustains some share of it. The share
    // has no upper bound here: it is a ratio of two timings taken apart, and on a loaded machine (ctest -j)
    // the peak's trials may be starved while the GEMM's are not.
    EXPECT_GT(hw["peak_flops"].get<double>(), 1e9);
    EXPECT_GT(hw["compute_efficiency"].get<double>(), 0.0);
    EXPECT_TRUE(std::isfinite(hw["compute_efficiency"].get<double>()));
  }
  // A stated peak is taken as given: nothing measured, the preset's sustained fraction.
  const ProgramResult given = run_fpdt("plan --model llama-tiny --seq 8K --hardware cpu --peak-tflops 1 --json");
  ASSERT_EQ(given.exit_status, 0) << given.output;
  const nlohmann::json hw = nlohmann::json::parse(given.output)["hardware"];
  EXPECT_EQ(hw["peak_flops"].get<double>(), 1e12);
  EXPECT_EQ(hw["compute_efficiency"].get<double>(), 0.5);
  EXPECT_EQ(hw["rates_measured"], "");
  const ProgramResult table = run_fpdt("plan --model llama-tiny --seq 8K --hardware cpu");
  ASSERT_EQ(table.exit_status, 0) << table.output;
  expect_contains(table.output, {"hardware  cpu", "GEMM's share of it, measured on"});
}

TEST(PlanCli, SharedOptionsAreSpelledAsTrainSpellsThem) {
  // --chunk-tokens with K = 1024, --offload disk:DIR (the directory is train's business), "auto" for 0.
  const ProgramResult chunked = run_fpdt(
      "plan --model llama3-8b --sp 4 --seq 1M --chunk-tokens 64K --offload disk:/scratch --recompute none --json");
  ASSERT_EQ(chunked.exit_status, 0) << chunked.output;
  const nlohmann::json json = nlohmann::json::parse(chunked.output);
  EXPECT_EQ(json["config"]["chunk_tokens"], 65536);
  EXPECT_EQ(json["config"]["offload"], "disk");
  EXPECT_EQ(json["config"]["recompute"], "none");
  const ProgramResult automatic = run_fpdt("plan --chunk-tokens auto --json");
  ASSERT_EQ(automatic.exit_status, 0) << automatic.output;
  EXPECT_GT(nlohmann::json::parse(automatic.output)["config"]["chunk_tokens"].get<int64_t>(), 0);
  // One help line per shared option, the same text in both commands.
  const std::string train_help = run_fpdt("train --help").output, plan_help = run_fpdt("plan --help").output;
  for (const char* shared : {"--seq S ", "--sp P ", "--dp N ", "--batch B ", "--mode ", "--recompute ", "--offload "}) {
    const size_t in_train = train_help.find(shared), in_plan = plan_help.find(shared);
    ASSERT_NE(in_train, std::string::npos) << shared;
    ASSERT_NE(in_plan, std::string::npos) << shared;
    const std::string train_line = train_help.substr(in_train, train_help.find('[', in_train) - in_train);
    const std::string plan_line = plan_help.substr(in_plan, plan_help.find('[', in_plan) - in_plan);
    EXPECT_EQ(train_line, plan_line);
  }
}

TEST(PlanCli, BadInputIsOneClearError) {
  struct Case {
    const char* args;
    const char* expected;
  };
  const Case cases[] = {
      {"plan --model gpt-99b", "unknown model preset 'gpt-99b'"},
      {"plan --hardware tpu-v5", "unknown hardware preset 'tpu-v5'"},
      {"plan --model gpt-30b --positions rope --sp 64", "--sp 64 is more sequence-parallel ranks than the 56 attention heads"},
      {"plan --model llama3-8b --sp 4 --seq 1M --chunk-tokens 2M", "--chunk-tokens 2097152 is longer than the sequence"},
      {"plan --model llama3-8b --sp 4 --seq 1M --chunk-tokens 6146", "--chunk-tokens 6146 does not split over --sp 4"},
      {"plan --seq 64 --chunks 1000", "--chunks 1000 leaves chunks without tokens"},
      {"plan --precision fp8", "unknown --precision 'fp8'"},
      {"plan --seq -1M", "--seq must be ≥ 1, got '-1M'"},
      {"plan --compute-mem -3GiB", "--compute-mem must be > 0, got '-3GiB'"},
      {"plan --host-link-gbps -1", "--host-link-gbps must be > 0, got '-1'"},
      {"plan --mode megatron", "unknown --mode 'megatron'"},
      {"plan --zero 4", "--zero must be ≥ 0 and ≤ 3, got '4'"},
      {"plan --offload nvme", "unknown --offload 'nvme'"},
      {"plan --chunk 64K", "unknown option --chunk for 'fpdt plan'"},
      // Heads the model cannot have are blamed on --heads (it blamed "rotary dims 1": issue 45 case 6).
      {"plan --heads 4096", "--heads 4096 gives 'llama3-8b' a head_dim of 1"},
      {"plan --heads 4", "--heads 4 gives 'llama3-8b' a head_dim of 1024 (hidden 4096, 8 key/value heads)"},
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

// The cpu-guarded backend (kernels/guarded/) runs what a GPU runs — `fpdt train` (llama-tiny, two chunks
// offloaded to RAM, a checkpoint, a resume) and `fpdt eval` (loss by position, the passkey grid, the store
// resident in the compute tier), and each ZeRO stage on one rank — to the end, with the cpu backend's
// results bit for bit: no host code touched compute-tier memory, which that backend makes a crash. And
// both refuse what they cannot run yet.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

// What a run wrote that does not depend on timing: per step loss, lr, gradient norm, validation loss.
struct RunOutputs {
  std::vector<std::pair<int64_t, nlohmann::json>> steps;
  std::string weights, moments;
  nlohmann::json loss_by_position, passkey;
};

// An eval JSON without its timings and the checkpoint's path (the runs' folders differ).
nlohmann::json without_timings(const std::string& path) {
  std::ifstream file(path);
  nlohmann::json json = nlohmann::json::parse(file);
  for (const char* field : {"seconds", "tokens_per_second", "peak_rss_bytes", "checkpoint"}) json.erase(field);
  return json;
}

// 3 steps of llama-tiny: stopped after step 2 (its checkpoint saved), resumed for step 3, evaluated.
RunOutputs train_resume_eval(const TinySetup& setup, const TempDir& dir, const std::string& backend) {
  const std::string out = dir.file("run-" + backend);
  const std::string common = "--model llama-tiny --data " + setup.data_dir + " --out " + out +
                             " --steps 3 --batch 2 --seq 48 --chunks 2 --offload ram --eval-every 1 --eval-batches 1 "
                             "--save-every 2 --threads 2 --peak-gflops 100 --backend " + backend;
  RunOutputs outputs;
  const ProgramResult first = run_fpdt("train " + common + " --stop-after 2", 300);
  EXPECT_EQ(first.exit_status, 0) << first.output;
  const ProgramResult resumed = run_fpdt("train " + common + " --resume", 300);
  EXPECT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 2"), std::string::npos) << resumed.output;
  const std::string eval_out = dir.file("eval-" + backend);
  const ProgramResult eval =
      run_fpdt("eval --checkpoint " + out + " --data " + setup.data_dir + " --seq 256 --chunks 2 --sequences 3 "
               "--passkey-lengths 250 --passkey-depths 2 --passkey-trials 1 --threads 2 --out " + eval_out +
               " --backend " + backend, 300);
  EXPECT_EQ(eval.exit_status, 0) << eval.output;
  outputs.steps = logged_steps(out + "/metrics.jsonl");
  outputs.weights = file_bytes(out + "/step_3/model.safetensors");
  outputs.moments = file_bytes(out + "/step_3/optimizer-0-of-1.safetensors");
  if (std::filesystem::exists(eval_out + "/passkey.json")) {
    outputs.loss_by_position = without_timings(eval_out + "/loss_by_position.json");
    outputs.passkey = without_timings(eval_out + "/passkey.json");
  }
  return outputs;
}

TEST(Guarded, TrainResumeAndEvalEqualTheCpuBackendBitwise) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const RunOutputs cpu = train_resume_eval(setup, dir, "cpu");
  const RunOutputs guarded = train_resume_eval(setup, dir, "cpu-guarded");
  ASSERT_EQ(cpu.steps.size(), 3u);
  ASSERT_EQ(guarded.steps.size(), 3u);
  for (size_t i = 0; i < cpu.steps.size(); ++i) EXPECT_EQ(guarded.steps[i], cpu.steps[i]) << "step " << i + 1;
  EXPECT_FALSE(cpu.weights.empty());
  EXPECT_TRUE(guarded.weights == cpu.weights) << "step_3/model.safetensors differs";
  EXPECT_TRUE(guarded.moments == cpu.moments) << "step_3's optimizer state differs";
  ASSERT_FALSE(cpu.passkey.is_null());
  EXPECT_EQ(guarded.loss_by_position, cpu.loss_by_position);
  EXPECT_EQ(guarded.passkey, cpu.passkey);  // its answers are the argmax of the logits
}

// ZeRO on one rank: its gathers and reduce-scatters are compute-tier copies and adds (model_states.cpp),
// with gradient accumulation so that the reduce-scatter adds.
TEST(Guarded, ZeroStagesOnOneRankEqualTheCpuBackendBitwise) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  for (const std::string zero : {"1", "2", "3"}) {
    SCOPED_TRACE("--zero " + zero);
    std::vector<std::pair<int64_t, nlohmann::json>> steps[2];
    std::string weights[2];
    const std::string backends[2] = {"cpu", "cpu-guarded"};
    for (int b = 0; b < 2; ++b) {
      const std::string out = dir.file("zero" + zero + "-" + backends[b]);
      const ProgramResult run =
          run_fpdt("train --model llama-tiny --data " + setup.data_dir + " --out " + out +
                   " --steps 2 --batch 1 --grad-accum 2 --seq 40 --chunks 2 --offload ram --eval-batches 1 --threads 2 "
                   "--peak-gflops 100 --zero " + zero + " --backend " + backends[b], 300);
      ASSERT_EQ(run.exit_status, 0) << run.output;
      steps[b] = logged_steps(out + "/metrics.jsonl");
      weights[b] = file_bytes(out + "/step_2/model.safetensors");
    }
    ASSERT_EQ(steps[0].size(), 2u);
    EXPECT_EQ(steps[1], steps[0]);
    EXPECT_FALSE(weights[0].empty());
    EXPECT_TRUE(weights[1] == weights[0]) << "step_2/model.safetensors differs";
  }
}

TEST(Guarded, OneRankAndNoOffloadedOptimizer) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  for (const std::string backend : {"cpu-guarded", "cuda"}) {
    const std::string run = "train --model llama-tiny --data " + setup.data_dir + " --out " + dir.file("r") +
                            " --steps 1 --seq 32 --backend " + backend;
    expect_one_clear_error(run_fpdt(run + " --sp 2"), {"[train]", "runs on one rank", "NCCL", "hint:"});
    expect_one_clear_error(run_fpdt(run + " --zero 2 --offload-optimizer ram"),
                           {"[train]", "does not offload the optimizer", "hint: drop --offload-optimizer"});
  }
}

}  // namespace
}  // namespace fpdt::testing

// The non-finite guard, with faults injected through the test hook FPDT_TEST_FAULT (never an option):
// - every update from step k on uses lr = inf: the run stops at step k with one error and a non-zero
//   exit; no checkpoint holds a non-finite value, the newest is step k − 1, and it resumes cleanly;
// - a NaN gradient in 3 steps in a row (the limit): each is skipped (the weights do not move), then
//   the run stops with an error naming the steps; every checkpoint is finite;
// - a NaN gradient in fewer steps than the limit: they are skipped and the run ends normally.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

namespace fs = std::filesystem;

// Runs `fpdt train` with FPDT_TEST_FAULT set to `fault`.
ProgramResult train_with_fault(const std::vector<std::string>& args, const std::string& fault) {
  ::setenv("FPDT_TEST_FAULT", fault.c_str(), 1);
  const ProgramResult result = run_fpdt(join_args(args), 300);
  ::unsetenv("FPDT_TEST_FAULT");
  return result;
}

// Every value in the checkpoint's model and optimizer files is finite (and the second moments ≥ 0).
void expect_finite_checkpoint(const std::string& folder) {
  for (const char* file : {"model.safetensors", "optimizer-0-of-1.safetensors"}) {
    SafetensorsReader reader(folder + "/" + file);
    for (const std::string& name : reader.names()) {
      const std::vector<float> values = reader.read_floats(name);
      for (float value : values) {
        ASSERT_TRUE(std::isfinite(value)) << folder << "/" << file << " " << name;
        if (name.starts_with("v.")) {
          ASSERT_GE(value, 0.0f) << folder << " " << name;
        }
      }
    }
  }
}

std::vector<std::string> step_folders(const std::string& run) {
  std::vector<std::string> folders;
  for (const auto& entry : fs::directory_iterator(run))
    if (entry.is_directory()) folders.push_back(entry.path().filename().string());
  std::sort(folders.begin(), folders.end());
  return folders;
}

class NonFinite : public ::testing::Test {
 protected:
  void SetUp() override { setup_ = std::make_unique<TinySetup>(dir_, fresh_seed()); }
  std::vector<std::string> every_step_saved(int64_t steps) const {
    std::vector<std::string> args = setup_->train_args(run_, steps);
    args.insert(args.end(), {"--save-every", "1"});  // the last flag wins: a checkpoint per step, 2 kept
    return args;
  }
  TempDir dir_;
  std::unique_ptr<TinySetup> setup_;
  const std::string run_ = dir_.file("run");
};

TEST_F(NonFinite, InfiniteLearningRateStopsTheRunAndKeepsTheLastFiniteCheckpoint) {
  const std::string& run = run_;
  const ProgramResult result = train_with_fault(every_step_saved(10), "lr-inf@6");
  expect_one_clear_error(result, {"[train]", "step 6's update made the weights non-finite", "not saved",
                                  "every checkpoint in " + run + " holds finite weights"});
  // Rotation kept the newest two, both before the fault and finite; latest is step 5.
  EXPECT_EQ(step_folders(run), (std::vector<std::string>{"step_4", "step_5"}));
  for (const std::string& folder : step_folders(run)) expect_finite_checkpoint(run + "/" + folder);
  EXPECT_EQ(file_bytes(run + "/latest"), "step_5\n");
  EXPECT_EQ(metrics_lines(run + "/metrics.jsonl").size(), 5u);
  // The last finite checkpoint continues the run.
  std::vector<std::string> resume = setup_->train_args(run, 10);
  resume.push_back("--resume");
  const ProgramResult resumed = run_fpdt(join_args(resume), 300);
  ASSERT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 5"), std::string::npos) << resumed.output;
  expect_finite_checkpoint(run + "/step_10");
}

TEST_F(NonFinite, NonFiniteStepsAreSkippedAndTooManyInARowStopTheRun) {
  const std::string& run = run_;
  const ProgramResult result = train_with_fault(every_step_saved(10), "nan-grad@4x5");
  expect_one_clear_error(result, {"[train]", "not finite in 3 steps in a row (4..6", "none of them was applied",
                                  "the weights are those of step 3"});
  const std::vector<nlohmann::json> lines = metrics_lines(run + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 6u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i].contains("skipped"), i >= 3) << lines[i].dump();
  EXPECT_TRUE(lines[3]["grad_norm"].is_null());  // NaN is logged as null
  // Skipped steps move nothing: the weights saved after steps 4 and 5 are both step 3's (bitwise);
  // the run stopped at step 6, before its checkpoint.
  EXPECT_EQ(step_folders(run), (std::vector<std::string>{"step_4", "step_5"}));
  EXPECT_EQ(checkpoint_weights(run + "/step_4"), checkpoint_weights(run + "/step_5"));
  for (const std::string& folder : step_folders(run)) expect_finite_checkpoint(run + "/" + folder);
}

TEST_F(NonFinite, FewerSkippedStepsThanTheLimitLetTheRunFinish) {
  const std::string& run = run_;
  const ProgramResult result = train_with_fault(setup_->train_args(run, 8), "nan-grad@3x2");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_NE(result.output.find("\"skipped_steps\":2"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("SKIPPED"), std::string::npos) << result.output;
  const std::vector<nlohmann::json> lines = metrics_lines(run + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 8u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i].contains("skipped"), i == 2 || i == 3);
  EXPECT_TRUE(std::isfinite(lines.back()["val_loss"].get<double>()));
  expect_finite_checkpoint(run + "/step_8");
}

TEST(NonFiniteHook, RefusesWhatItDoesNotKnow) {
  expect_one_clear_error(train_with_fault({"train"}, "melt@3"), {"[train]", "FPDT_TEST_FAULT='melt@3'"});
}

}  // namespace
}  // namespace fpdt::testing

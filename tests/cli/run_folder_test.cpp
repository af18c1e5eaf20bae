// The run folder belongs to one run: a fresh run into a folder that holds one is refused and changes
// nothing; --overwrite deletes only that run's entries and says which; --resume removes what a killed
// writer left (temp files, .partial folders) and keeps each step once in metrics.jsonl, and continues
// a run killed inside its first save; a second live writer is refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>

#include <filesystem>

#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

namespace fs = std::filesystem;

std::vector<int64_t> logged_steps(const std::string& path) {
  std::vector<int64_t> steps;
  for (const nlohmann::json& line : metrics_lines(path)) steps.push_back(line["step"].get<int64_t>());
  return steps;
}

std::vector<int64_t> steps_from(int64_t first, int64_t last) {
  std::vector<int64_t> steps;
  for (int64_t step = first; step <= last; ++step) steps.push_back(step);
  return steps;
}

class RunFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    setup_ = std::make_unique<TinySetup>(dir_, fresh_seed());
    run_ = dir_.file("run");
    const ProgramResult first = run_fpdt(join_args(setup_->train_args(run_, 10)));
    ASSERT_EQ(first.exit_status, 0) << first.output;
    write_text_file(run_ + "/notes.txt", "the user's own file");
  }
  ProgramResult train(int64_t steps, const std::string& flag) {
    std::vector<std::string> args = setup_->train_args(run_, steps);
    if (!flag.empty()) args.push_back(flag);
    return run_fpdt(join_args(args), 300);
  }
  TempDir dir_;
  std::unique_ptr<TinySetup> setup_;
  std::string run_;
};

TEST_F(RunFolder, AFreshRunIntoARunIsRefusedAndChangesNothing) {
  const std::string metrics_before = file_bytes(run_ + "/metrics.jsonl");
  expect_one_clear_error(train(3, ""), {"[train]", run_ + " already holds a run", "--resume", "--overwrite"});
  EXPECT_EQ(file_bytes(run_ + "/latest"), "step_10\n");
  EXPECT_EQ(file_bytes(run_ + "/metrics.jsonl"), metrics_before);
  EXPECT_TRUE(fs::exists(run_ + "/step_10/model.safetensors"));
}

TEST_F(RunFolder, OverwriteDeletesOnlyTheRunAndSaysSo) {
  const ProgramResult result = train(3, "--overwrite");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  expect_contains(result.output, {"--overwrite: deleted the previous run in " + run_ + ": latest, metrics.jsonl, "
                                  "step_10, step_5"});
  EXPECT_EQ(file_bytes(run_ + "/latest"), "step_3\n");
  EXPECT_FALSE(fs::exists(run_ + "/step_5"));
  EXPECT_FALSE(fs::exists(run_ + "/step_10"));
  EXPECT_EQ(logged_steps(run_ + "/metrics.jsonl"), steps_from(1, 3));
  EXPECT_EQ(file_bytes(run_ + "/notes.txt"), "the user's own file");
}

TEST_F(RunFolder, ResumeCleansWhatAKilledWriterLeftAndLogsEachStepOnce) {
  // A writer killed after step 12 was logged, during the save of step 15: its temp files and the
  // unfinished step folder are there, `latest` still names step_10, and metrics.jsonl runs ahead with
  // a torn last line.
  write_text_file(run_ + "/latest.tmp.a1B2c3", "step_15\n");
  fs::create_directories(run_ + "/step_15.partial");
  write_text_file(run_ + "/step_15.partial/model.safetensors.tmp.x9Y8z7", "half");
  std::string metrics = file_bytes(run_ + "/metrics.jsonl");
  for (int64_t step : {11, 12}) metrics += "{\"step\":" + std::to_string(step) + ",\"loss\":9.0}\n";
  metrics += "{\"step\":13,\"lo";
  write_text_file(run_ + "/metrics.jsonl", metrics);

  const ProgramResult result = train(14, "--resume");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  expect_contains(result.output, {"removed what an interrupted run left in " + run_ + ": latest.tmp.a1B2c3, "
                                  "step_15.partial"});
  EXPECT_FALSE(fs::exists(run_ + "/latest.tmp.a1B2c3"));
  EXPECT_FALSE(fs::exists(run_ + "/step_15.partial"));
  EXPECT_EQ(logged_steps(run_ + "/metrics.jsonl"), steps_from(1, 14));
  EXPECT_EQ(file_bytes(run_ + "/notes.txt"), "the user's own file");
}

TEST_F(RunFolder, AKillInsideTheFirstSaveLeavesARunToResume) {
  // The first save writes "none" into `latest` before it renames its folder. A run killed inside it
  // (step 5) after the step folder was completed and renamed, before `latest` named it: step_5 is
  // there, `latest` still says none, metrics.jsonl ran on to step 10. A resume continues from step_5.
  fs::remove_all(run_ + "/step_10");
  write_text_file(run_ + "/latest", "none\n");
  const ProgramResult result = train(12, "--resume");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  expect_contains(result.output, {"resuming from step_5: the first save completed it"});
  EXPECT_EQ(file_bytes(run_ + "/latest"), "step_12\n");
  EXPECT_EQ(logged_steps(run_ + "/metrics.jsonl"), steps_from(1, 12));

  // Such a folder, without the step folder, has no checkpoint: eval says so.
  const std::string fresh = dir_.file("fresh");
  fs::create_directories(fresh);
  write_text_file(fresh + "/latest", "none\n");
  expect_one_clear_error(run_fpdt("eval --checkpoint " + fresh), {"[checkpoint]", "no checkpoint yet"});
}

TEST_F(RunFolder, ASecondLiveWriterIsRefused) {
  // What a running `fpdt train` holds: an exclusive lock on the folder.
  const int fd = ::open(run_.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  expect_one_clear_error(train(12, "--resume"), {"[train]", "another fpdt train is writing to " + run_});
  ::close(fd);  // the writer ends: the folder is free again
  const ProgramResult resumed = train(12, "--resume");
  EXPECT_EQ(resumed.exit_status, 0) << resumed.output;
}

}  // namespace
}  // namespace fpdt::testing

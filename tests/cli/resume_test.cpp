// Resume: a run killed (SIGKILL) after its step-10 checkpoint and resumed with --resume gives
// bitwise the same losses, validation losses and final weights as a run that was never stopped, and
// its metrics.jsonl holds each step once (the steps re-run after the checkpoint replace their lines).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

bool logged(const std::string& path, int64_t step) {
  for (const auto& [logged_step, fields] : logged_steps(path))
    if (logged_step == step) return true;
  return false;
}

TEST(Resume, KilledAndResumedRunIsBitwiseTheUninterruptedRun) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const std::string straight = dir.file("straight"), killed = dir.file("killed");

  const ProgramResult full = run_fpdt(join_args(setup.train_args(straight, 20)));
  ASSERT_EQ(full.exit_status, 0) << full.output;

  // Kill the second run once step 11 has been logged: its step-10 checkpoint is complete by then.
  const pid_t pid = start_fpdt(setup.train_args(killed, 20), dir.file("killed.log"));
  ASSERT_GT(pid, 0);
  bool exited_by_itself = false;
  for (int wait_ms = 0; wait_ms < 120000; ++wait_ms) {
    if (logged(killed + "/metrics.jsonl", 11)) break;
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exited_by_itself = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!exited_by_itself) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  std::printf("[ killed   ] %s\n", exited_by_itself ? "no: the run ended before the kill" : "yes, with SIGKILL");
  // However far past step 10 the process got before the kill landed, the run continues from the
  // step-10 checkpoint: point `latest` there and drop anything newer, as if it died right after.
  write_text_file(killed + "/latest", "step_10\n");
  for (int step : {15, 20}) std::filesystem::remove_all(killed + "/step_" + std::to_string(step));

  std::vector<std::string> resume_args = setup.train_args(killed, 20);
  resume_args.push_back("--resume");
  const ProgramResult resumed = run_fpdt(join_args(resume_args));
  ASSERT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 10"), std::string::npos) << resumed.output;

  const auto want = logged_steps(straight + "/metrics.jsonl");
  const auto got = logged_steps(killed + "/metrics.jsonl");
  ASSERT_EQ(want.size(), 20u);
  ASSERT_EQ(got.size(), 20u);  // each step once, in order
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, static_cast<int64_t>(i + 1));
    EXPECT_EQ(got[i], want[i]) << "step " << i + 1;  // bitwise
  }
  EXPECT_EQ(file_bytes(killed + "/step_20/model.safetensors"), file_bytes(straight + "/step_20/model.safetensors"));
  EXPECT_EQ(file_bytes(killed + "/step_20/optimizer-0-of-1.safetensors"),
            file_bytes(straight + "/step_20/optimizer-0-of-1.safetensors"));
}

}  // namespace
}  // namespace fpdt::testing

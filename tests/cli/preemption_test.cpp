// A preempted job loses nothing (issue 45 item 8): SIGTERM, SIGINT or SIGUSR1 at a random moment of a
// `--save-every 1000` run makes it finish its step, save that step and exit with status 75; `--resume`
// continues it; after 10 such signals the run that completes has the uninterrupted run's final weights,
// bitwise, and logged every step once. A second signal ends the process at once and leaves the last
// checkpoint as it was.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

// Waits for `pid` up to `seconds`; its wait status, or -1 (then it is killed) when it did not end.
int wait_status(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return status;
}

// Starts the run and returns once it has logged a step beyond `after` (or ended); its pid.
pid_t start_and_wait_for_step(const std::vector<std::string>& args, const std::string& run, int64_t after,
                              const std::string& log) {
  const pid_t pid = start_fpdt(args, log);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int status = 0;
  while (last_logged_step(run) <= after && std::chrono::steady_clock::now() < deadline &&
         ::waitpid(pid, &status, WNOHANG) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return pid;
}

TEST(Preemption, SignalsSaveTheStepAndResumeEndsBitwiseAsTheUninterruptedRun) {
  constexpr int64_t kSteps = 1000;  // ~1 ms a step: 10 signals use a few hundred, whatever the timing
  constexpr int kSignals = 10;
  TempDir dir;
  const uint64_t seed = fresh_seed();
  const TinySetup setup(dir, seed);
  auto args = [&](const std::string& out) {
    std::vector<std::string> train = setup.train_args(out, kSteps);
    train.insert(train.end(), {"--save-every", "1000", "--eval-every", "0", "--threads", "1", "--resume"});
    return train;
  };
  const std::string straight = dir.file("straight"), preempted = dir.file("preempted");
  const ProgramResult uninterrupted = run_fpdt(join_args(args(straight)), 300);
  ASSERT_EQ(uninterrupted.exit_status, 0) << uninterrupted.output;

  Rng rng(seed);
  const int signals[] = {SIGTERM, SIGINT, SIGUSR1};
  int preemptions = 0;
  for (int attempt = 0; preemptions < kSignals && attempt < 3 * kSignals; ++attempt) {
    const int64_t before = last_logged_step(preempted);
    const std::string log = dir.file("attempt" + std::to_string(attempt) + ".log");
    const pid_t pid = start_and_wait_for_step(args(preempted), preempted, before, log);
    std::this_thread::sleep_for(std::chrono::microseconds(rng.below(5000)));  // anywhere in a step
    const int signal = signals[attempt % 3];
    ::kill(pid, signal);
    const int status = wait_status(pid, 120);
    ASSERT_NE(status, -1) << "the run did not end after signal " << signal << "\n" << file_bytes(log);
    // It may have finished before the signal came: then it exited 0, or (the signal landing as the process
    // ended, after its handlers) by the signal — either way with the last step saved.
    if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || WIFSIGNALED(status)) {
      EXPECT_EQ(latest_of(preempted), "step_" + std::to_string(kSteps)) << file_bytes(log);
      break;
    }
    ASSERT_TRUE(WIFEXITED(status)) << file_bytes(log);
    ASSERT_EQ(WEXITSTATUS(status), 75) << file_bytes(log);
    ++preemptions;
    // The step it was in is saved, and is the last it logged.
    const int64_t stopped = last_logged_step(preempted);
    EXPECT_GT(stopped, before);
    EXPECT_EQ(latest_of(preempted), "step_" + std::to_string(stopped)) << file_bytes(log);
    EXPECT_NE(file_bytes(log).find("preempted (SIG"), std::string::npos) << file_bytes(log);
  }
  EXPECT_EQ(preemptions, kSignals) << "the run finished before " << kSignals << " signals: make it longer";

  // Two signals at once: the second ends the process by that signal; the last checkpoint stays as it was.
  {
    const std::string kept = latest_of(preempted);
    const pid_t pid = start_and_wait_for_step(args(preempted), preempted, last_logged_step(preempted),
                                              dir.file("twice.log"));
    ::kill(pid, SIGTERM);
    ::kill(pid, SIGTERM);
    const int status = wait_status(pid, 120);
    ASSERT_NE(status, -1);
    // Both signals may land between two checks of the step: then the second one ends the process; or the
    // first is taken at a step's end before the second arrives: then it saved and exited 75.
    if (WIFSIGNALED(status)) {
      EXPECT_EQ(WTERMSIG(status), SIGTERM);
      EXPECT_EQ(latest_of(preempted), kept);
    } else {
      EXPECT_EQ(WEXITSTATUS(status), 75) << file_bytes(dir.file("twice.log"));
    }
  }

  const ProgramResult finished = run_fpdt(join_args(args(preempted)), 300);
  ASSERT_EQ(finished.exit_status, 0) << finished.output;
  EXPECT_EQ(checkpoint_weights(preempted + "/step_" + std::to_string(kSteps)),
            checkpoint_weights(straight + "/step_" + std::to_string(kSteps)));
  // Every step logged once (a resumed run drops the lines after its checkpoint: the killed attempt's).
  std::map<int64_t, int> logged;
  for (const auto& [step, fields] : logged_steps(preempted + "/metrics.jsonl")) ++logged[step];
  EXPECT_EQ(static_cast<int64_t>(logged.size()), kSteps);
  for (const auto& [step, count] : logged) EXPECT_EQ(count, 1) << "step " << step;
}

}  // namespace
}  // namespace fpdt::testing

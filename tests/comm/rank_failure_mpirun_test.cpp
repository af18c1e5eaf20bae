// A rank that dies, fails or stops in the middle of a collective takes the whole MPI job down
// quickly, and a rank that is merely slow does not: runs tests/comm/rank_failure_mpi_program.cpp
// under mpirun (with the flags ctest's MPI tests use) and checks the exit status, the time from the
// failure to the end of the job, and that the output names the failed rank.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "testing.h"

namespace {

struct Outcome {
  bool exited = false;  // false: killed by a signal, or by us at the timeout
  int exit_code = -1;
  bool timed_out = false;
  double seconds = 0.0;       // from the launch to the end of the job
  double ended_at = 0.0;      // steady_clock seconds when the job ended
  std::string output;  // stdout and stderr together
};

// Runs argv (in its own process group) with a deadline; at the deadline the whole group is killed.
Outcome run_with_timeout(const std::vector<std::string>& args, double timeout_seconds) {
  Outcome outcome;
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    ::setpgid(0, 0);
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::setpgid(child, child);
  ::close(pipe_fds[1]);
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  int status = 0;
  bool reaped = false;
  for (;;) {
    pollfd poll_fd{pipe_fds[0], POLLIN, 0};
    if (::poll(&poll_fd, 1, 50) > 0) {
      char buffer[4096];
      const ssize_t got = ::read(pipe_fds[0], buffer, sizeof buffer);
      if (got > 0) outcome.output.append(buffer, static_cast<size_t>(got));
      if (got == 0 && reaped) break;  // end of output after the launcher ended
    }
    if (!reaped && ::waitpid(child, &status, WNOHANG) == child) {
      reaped = true;
      outcome.seconds = elapsed();
      outcome.ended_at = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }
    if (reaped && elapsed() > outcome.seconds + 5.0) break;  // a straggler holds the pipe open
    if (!reaped && elapsed() > timeout_seconds) {
      outcome.timed_out = true;
      ::kill(-child, SIGKILL);
      ::waitpid(child, &status, 0);
      reaped = true;
      outcome.seconds = elapsed();
      break;
    }
  }
  ::kill(-child, SIGKILL);  // nothing of the job may outlive the test
  ::close(pipe_fds[0]);
  outcome.exited = WIFEXITED(status);
  outcome.exit_code = outcome.exited ? WEXITSTATUS(status) : -1;
  return outcome;
}

// Seconds from the failing rank's "failing at T" line to the end of the job (-1: no such line).
double seconds_after_failure(const Outcome& outcome) {
  const size_t at = outcome.output.find("failing at ");
  if (at == std::string::npos) return -1.0;
  return outcome.ended_at - std::stod(outcome.output.substr(at + 11));
}

Outcome run_job(int ranks, const std::string& mode, int failing_rank, double deadline_seconds = 0) {
  std::vector<std::string> args = {FPDT_MPIEXEC, FPDT_MPIEXEC_NUMPROC_FLAG, std::to_string(ranks)};
  std::istringstream flags(FPDT_MPIEXEC_FLAGS);
  for (std::string flag; flags >> flag;) args.push_back(flag);
  args.push_back(std::string(FPDT_BINARY_DIR) + "/comm_rank_failure_mpi_program");
  args.push_back(mode);
  args.push_back(std::to_string(failing_rank));
  if (deadline_seconds > 0) args.push_back(std::to_string(deadline_seconds));
  Outcome outcome = run_with_timeout(args, 60.0);
  std::printf("--- mpirun -np %d, %s rank %d: exit %d after %.1f s (%.1f s after the failure); output:\n%s---\n",
              ranks, mode.c_str(), failing_rank, outcome.exit_code, outcome.seconds, seconds_after_failure(outcome),
              outcome.output.c_str());
  return outcome;
}

TEST(RankFailure, HealthyJobExitsZero) {
  const Outcome outcome = run_job(2, "none", -1);
  EXPECT_FALSE(outcome.timed_out);
  EXPECT_TRUE(outcome.exited);
  EXPECT_EQ(outcome.exit_code, 0);
  fpdt::testing::expect_contains(outcome.output, {"all steps done"});
}

// Issue 11's bound for a killed rank: the launcher sees the process die, no deadline involved.
TEST(RankFailure, KilledRankEndsTheJobWithinFiveSecondsNamingIt) {
  const Outcome outcome = run_job(4, "kill", 1);
  EXPECT_FALSE(outcome.timed_out) << "the job hung";
  EXPECT_GE(seconds_after_failure(outcome), 0.0) << "the rank did not get to step 3";
  EXPECT_LT(seconds_after_failure(outcome), 5.0);
  EXPECT_FALSE(outcome.exited && outcome.exit_code == 0);
  fpdt::testing::expect_contains(outcome.output, {"rank 1"});
  EXPECT_EQ(outcome.output.find("all steps done"), std::string::npos);
}

TEST(RankFailure, RankErrorAbortsTheJobNamingIt) {
  const Outcome outcome = run_job(4, "throw", 2);
  EXPECT_FALSE(outcome.timed_out) << "the job hung";
  EXPECT_LT(outcome.seconds, 30.0);
  EXPECT_FALSE(outcome.exited && outcome.exit_code == 0);
  fpdt::testing::expect_contains(outcome.output, {"rank 2: [test] injected failure in step 3"});
  EXPECT_EQ(outcome.output.find("all steps done"), std::string::npos);
}

// A stopped rank is alive to the OS (mpirun sees nothing) and silent to its peers: its watcher ends
// the job once the deadline passes without a heartbeat — issue 11's bound is deadline + 10 s.
TEST(RankFailure, StoppedRankEndsTheJobWithinTheDeadlineNamingIt) {
  const double deadline = 3.0;
  fpdt::Rng rng(fpdt::testing::fresh_seed());
  const int stopped = static_cast<int>(rng.below(3));
  const Outcome outcome = run_job(3, "stop", stopped, deadline);
  EXPECT_FALSE(outcome.timed_out) << "the job hung";
  EXPECT_FALSE(outcome.exited && outcome.exit_code == 0);
  EXPECT_GE(seconds_after_failure(outcome), deadline * 0.9) << "ended before the deadline passed";
  EXPECT_LT(seconds_after_failure(outcome), deadline + 10.0);
  fpdt::testing::expect_contains(outcome.output, {"[comm] rank " + std::to_string(stopped) + " sent no heartbeat"});
  EXPECT_EQ(outcome.output.find("all steps done"), std::string::npos);
}

// A rank computing for two deadlines before its collectives keeps beating from its watchdog
// thread: the others wait for it and the job ends normally. (A deadline of seconds, not less: a
// loaded machine can leave a thread unscheduled for a good part of a second.)
TEST(RankFailure, ALongStepIsNotTakenForAHang) {
  const Outcome outcome = run_job(2, "slow", 1, 3.0);
  EXPECT_FALSE(outcome.timed_out) << "the job hung";
  EXPECT_TRUE(outcome.exited);
  EXPECT_EQ(outcome.exit_code, 0);
  fpdt::testing::expect_contains(outcome.output, {"all steps done"});
  EXPECT_EQ(outcome.output.find("heartbeat"), std::string::npos);
}

}  // namespace

// A rank that dies or fails in the middle of a collective takes the whole MPI job down quickly:
// runs tests/comm/rank_failure_mpi_program.cpp under mpirun (with the flags ctest's MPI tests
// use) and checks the exit status, the time it took and that the output names the failed rank.
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
  double seconds = 0.0;
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

Outcome run_job(int ranks, const std::string& mode, int failing_rank) {
  std::vector<std::string> args = {FPDT_MPIEXEC, FPDT_MPIEXEC_NUMPROC_FLAG, std::to_string(ranks)};
  std::istringstream flags(FPDT_MPIEXEC_FLAGS);
  for (std::string flag; flags >> flag;) args.push_back(flag);
  args.push_back(std::string(FPDT_BINARY_DIR) + "/comm_rank_failure_mpi_program");
  args.push_back(mode);
  args.push_back(std::to_string(failing_rank));
  Outcome outcome = run_with_timeout(args, 30.0);
  std::printf("--- mpirun -np %d, %s rank %d: exit %d after %.1f s; output:\n%s---\n", ranks, mode.c_str(),
              failing_rank, outcome.exit_code, outcome.seconds, outcome.output.c_str());
  return outcome;
}

TEST(RankFailure, HealthyJobExitsZero) {
  const Outcome outcome = run_job(2, "none", -1);
  EXPECT_FALSE(outcome.timed_out);
  EXPECT_TRUE(outcome.exited);
  EXPECT_EQ(outcome.exit_code, 0);
  fpdt::testing::expect_contains(outcome.output, {"all steps done"});
}

TEST(RankFailure, KilledRankEndsTheJobWithinThirtySecondsNamingIt) {
  const Outcome outcome = run_job(4, "kill", 1);
  EXPECT_FALSE(outcome.timed_out) << "the job hung";
  EXPECT_LT(outcome.seconds, 30.0);
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

}  // namespace

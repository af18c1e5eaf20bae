// `fpdt train --sp 2` under mpirun when a rank stops taking part: SIGSTOP of either rank ends the job
// within --comm-timeout + 10 s with the silent rank named (before the heartbeat watchdog the other
// rank spun at 100 % CPU forever); SIGKILL still ends it within 5 s (issue 11).
#include <gtest/gtest.h>

#include <algorithm>

#include "mpirun_program.h"

namespace fpdt::testing {
namespace {

struct Stopped {
  JobEnd end;
  std::string output;
};

// Trains with sp 2 until a few steps are logged, sends `signal` to rank `victim`, waits for the end.
Stopped signal_a_rank(int victim, int signal, double comm_timeout) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const std::string out = dir.file("run");
  std::vector<std::string> args = setup.train_args(out, 100000);
  args.insert(args.end(), {"--sp", "2", "--seq", "64", "--threads", "1", "--save-every", "0", "--comm-timeout",
                           std::to_string(comm_timeout)});
  const pid_t mpirun = start_fpdt_mpirun(2, args, dir.file("mpirun.log"));
  pid_t pid = 0;
  for (int attempt = 0; attempt < 6000 && pid == 0; ++attempt) {
    const std::string lines = file_bytes(out + "/metrics.jsonl");
    if (std::count(lines.begin(), lines.end(), '\n') >= 3) pid = find_rank_process(victim, mpirun);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Stopped stopped;
  EXPECT_GT(pid, 0) << "rank " << victim << " never got going";
  if (pid > 0) ::kill(pid, signal);
  stopped.end = wait_for_job(mpirun, comm_timeout + 60);
  if (pid > 0) ::kill(pid, SIGKILL);  // nothing of the job may outlive the test, stopped or not
  stopped.output = file_bytes(dir.file("mpirun.log"));
  std::printf("[ signal   ] %s to rank %d; the job ended after %.1f s\n", signal == SIGSTOP ? "SIGSTOP" : "SIGKILL",
              victim, stopped.end.seconds);
  return stopped;
}

TEST(Liveness, StoppedRankEndsTheJobWithinTheDeadlineNamingIt) {
  const double comm_timeout = 3;
  for (int victim : {0, 1}) {
    const Stopped stopped = signal_a_rank(victim, SIGSTOP, comm_timeout);
    EXPECT_TRUE(stopped.end.ended) << "the job hung\n" << stopped.output;
    EXPECT_LT(stopped.end.seconds, comm_timeout + 10) << stopped.output;
    EXPECT_FALSE(WIFEXITED(stopped.end.status) && WEXITSTATUS(stopped.end.status) == 0) << stopped.output;
    expect_contains(stopped.output, {"rank " + std::to_string(1 - victim) + ": [comm] rank " +
                                     std::to_string(victim) + " sent no heartbeat"});
  }
}

TEST(Liveness, KilledRankEndsTheJobWithinFiveSeconds) {
  Rng rng(fresh_seed());
  const int victim = static_cast<int>(rng.below(2));
  const Stopped killed = signal_a_rank(victim, SIGKILL, 600);
  EXPECT_TRUE(killed.end.ended) << "the job hung\n" << killed.output;
  EXPECT_LT(killed.end.seconds, 5.0) << killed.output;
  EXPECT_FALSE(WIFEXITED(killed.end.status) && WEXITSTATUS(killed.end.status) == 0) << killed.output;
  expect_contains(killed.output, {"rank " + std::to_string(victim)});
}

}  // namespace
}  // namespace fpdt::testing

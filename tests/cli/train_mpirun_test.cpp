// `fpdt train` under mpirun: P = 1, 2, 4 sequence-parallel ranks (GQA split and replicated) and
// sp 2 × dp 2 end 5 AdamW steps at the weights of the single-process run within 1e-5; and a rank
// killed in the middle of a step takes the job down within 30 s with the failed rank named.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "fpdt/tensor/safetensors.h"
#include "mpirun_program.h"

namespace fpdt::testing {
namespace {

std::vector<float> final_weights(const std::string& run, int64_t step) {
  return checkpoint_weights(run + "/step_" + std::to_string(step));
}

std::vector<std::string> five_steps(const TinySetup& setup, const std::string& out, int batch) {
  std::vector<std::string> args = setup.train_args(out, 5);
  args.insert(args.end(), {"--seq", "30", "--chunks", "2", "--offload", "ram", "--threads", "1", "--batch",
                           std::to_string(batch), "--eval-batches", "1"});
  return args;
}

ProgramResult run_mpi(const std::vector<std::string>& prefix, const std::vector<std::string>& args) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  std::string command;
  for (const std::string& word : prefix) command += "'" + word + "' ";
  command += "'" + fpdt_binary() + "' " + join_args(args) + " 2>&1";
  ProgramResult result;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  char buffer[4096];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, got);
  const int status = ::pclose(pipe);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

TEST(TrainMpirun, SequenceAndDataParallelRanksMatchOneProcess) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const ProgramResult single = run_fpdt(join_args(five_steps(setup, dir.file("single"), 1)));
  ASSERT_EQ(single.exit_status, 0) << single.output;
  const ProgramResult single_b2 = run_fpdt(join_args(five_steps(setup, dir.file("single_b2"), 2)));
  ASSERT_EQ(single_b2.exit_status, 0) << single_b2.output;
  for (const auto& [sp, dp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {4, 1}, {2, 2}}) {
    const std::string out = dir.file("mpi_" + std::to_string(sp) + "x" + std::to_string(dp));
    std::vector<std::string> args = five_steps(setup, out, 1);
    args.insert(args.end(), {"--sp", std::to_string(sp), "--dp", std::to_string(dp)});
    const ProgramResult run = run_mpi(mpirun_prefix(sp * dp), args);
    ASSERT_EQ(run.exit_status, 0) << run.output;
    // fp32 rounding of a different summation order compounded over 5 AdamW steps: 1e-5 (the bar).
    const double error =
        relative_error(final_weights(out, 5), final_weights(dir.file(dp == 2 ? "single_b2" : "single"), 5));
    std::printf("[ error    ] mpirun sp %d x dp %d: weights after 5 steps %.2e\n", sp, dp, error);
    EXPECT_LE(error, 1e-5) << "sp " << sp << " dp " << dp;
  }
}

TEST(TrainMpirun, KilledRankEndsTheJobWithinSecondsNamingTheRank) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const std::string out = dir.file("victim_run");
  std::vector<std::string> args = setup.train_args(out, 100000);
  args.insert(args.end(), {"--sp", "2", "--seq", "64", "--threads", "1", "--save-every", "0"});
  std::vector<std::string> command = mpirun_prefix(2);
  command.push_back(fpdt_binary());
  command.insert(command.end(), args.begin(), args.end());
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  const pid_t mpirun = start_program(command[0], std::vector<std::string>(command.begin() + 1, command.end()),
                                     dir.file("mpirun.log"));
  // Wait until training is under way (a few steps logged), then kill rank 1 mid-run.
  pid_t victim = 0;
  for (int attempt = 0; attempt < 6000 && victim == 0; ++attempt) {
    std::ifstream metrics(out + "/metrics.jsonl");
    const std::string lines((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
    if (std::count(lines.begin(), lines.end(), '\n') >= 3) victim = find_rank_process(1, out);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(victim, 0) << "rank 1 never got going";
  ::kill(victim, SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  int status = 0;
  bool ended = false;
  while (std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(30)) {
    if (::waitpid(mpirun, &status, WNOHANG) == mpirun) {
      ended = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!ended) {
    ::kill(mpirun, SIGKILL);
    ::waitpid(mpirun, &status, 0);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::ifstream log(dir.file("mpirun.log"));
  const std::string output((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  std::printf("[ killed   ] rank 1 (pid %d); the job ended after %.1f s\n", victim, seconds);
  EXPECT_TRUE(ended) << "the job did not end within 30 s of the kill\n" << output;
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_NE(output.find("rank 1"), std::string::npos) << output;
}

}  // namespace
}  // namespace fpdt::testing

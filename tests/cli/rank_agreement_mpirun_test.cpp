// Ranks launched with different options (mpirun's MPMD form, `-np 1 fpdt A : -np 1 fpdt B`, as a node with
// another script would be) are refused before the first step, each differing option named with the ranks
// of each value, within seconds — train, eval and sample alike; the same options on every rank run.
#include <gtest/gtest.h>

#include <chrono>

#include "mpirun_program.h"

namespace fpdt::testing {
namespace {

// `mpirun -np 1 fpdt <first> : -np 1 fpdt <second>` to completion, killed after 60 s.
ProgramResult run_two_command_lines(const std::vector<std::string>& first, const std::vector<std::string>& second) {
  std::string command = "timeout -s KILL 60 ";
  for (const std::string& word : mpirun_prefix(1)) command += "'" + word + "' ";
  command += "'" + fpdt_binary() + "' " + join_args(first) + " : -np 1 '" + fpdt_binary() + "' " + join_args(second);
  return run_command(command);
}

void expect_refused_naming(const ProgramResult& result, const std::vector<std::string>& parts) {
  EXPECT_NE(result.exit_status, 0) << result.output;
  EXPECT_NE(result.exit_status, 137) << "killed after 60 s: the job hung\n" << result.output;
  for (const std::string& part : parts)
    EXPECT_NE(result.output.find(part), std::string::npos) << part << " in\n" << result.output;
}

TEST(RankAgreement, RanksLaunchedWithDifferentOptionsAreRefusedNamingThem) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  auto train = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = setup.train_args(dir.file("run"), 2);
    args.insert(args.end(), {"--sp", "2", "--overwrite"});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const auto started = std::chrono::steady_clock::now();
  expect_refused_naming(run_two_command_lines(train({"--steps", "2"}), train({"--steps", "3"})),
                        {"[train] the 2 ranks were launched with different options", "--steps (2 on rank 0; 3 on rank 1)",
                         "hint: launch every rank with the same command line"});
  expect_refused_naming(run_two_command_lines(train({"--lr", "1e-3", "--seed", "1"}), train({"--lr", "2e-3", "--seed", "2"})),
                        {"--lr (", "--seed (1 on rank 0; 2 on rank 1)"});
  expect_refused_naming(run_two_command_lines(train({"--sp", "2", "--dp", "1"}), train({"--sp", "1", "--dp", "2"})),
                        {"--sp (1 on rank 1; 2 on rank 0)", "--dp (1 on rank 0; 2 on rank 1)"});
  expect_refused_naming(run_two_command_lines(train({"--zero", "0"}), train({"--zero", "3"})), {"--zero (0 on rank 0; 3 on rank 1)"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("run/step_2"))) << "a refused job saved a checkpoint";
  // eval and sample check theirs the same way (the checkpoint: a run of one process).
  const ProgramResult trained = run_fpdt(join_args(setup.train_args(dir.file("one"), 2)));
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  auto eval = [&](const std::string& seq) {
    return std::vector<std::string>{"eval", "--checkpoint", dir.file("one"), "--data", setup.data_dir, "--seq", seq,
                                    "--sp", "2", "--passkey-lengths", "none", "--threads", "1", "--out", dir.file("eval")};
  };
  expect_refused_naming(run_two_command_lines(eval("64"), eval("128")), {"[eval]", "--seq (128 on rank 1; 64 on rank 0)"});
  auto sample = [&](const std::string& tokens) {
    return std::vector<std::string>{"sample", "--checkpoint", dir.file("one"), "--tokens", tokens, "--sp", "2",
                                    "--threads", "1"};
  };
  expect_refused_naming(run_two_command_lines(sample("4"), sample("5")), {"[sample]", "--tokens (4 on rank 0; 5 on rank 1)"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("[ seconds  ] 6 refused jobs and a training run: %.1f s\n", seconds);
  // The same options on both ranks run.
  const ProgramResult agreed = run_two_command_lines(sample("4"), sample("4"));
  EXPECT_EQ(agreed.exit_status, 0) << agreed.output;
}

}  // namespace
}  // namespace fpdt::testing

// `fpdt sample --sp 2` under mpirun: two processes share the prompt's chunks and the KV cache's heads, and
// answer greedily with one process's tokens (chunked, the cache offloaded to RAM).
#include <gtest/gtest.h>

#include "mpirun_program.h"

namespace fpdt::testing {
namespace {

// The ids line of a sample's output.
std::string ids_line(const ProgramResult& result) {
  const size_t at = result.output.find("\nids:");
  EXPECT_NE(at, std::string::npos) << result.output;
  return at == std::string::npos ? "" : result.output.substr(at, result.output.find('\n', at + 1) - at);
}

TEST(SampleMpirun, TwoRanksAnswerAsOneProcess) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const ProgramResult trained = run_fpdt(join_args(setup.train_args(dir.file("run"), 5)));
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  auto sample_args = [&](int sp) {
    return std::vector<std::string>{"sample", "--checkpoint", dir.file("run"), "--prompt",
                                    "In the beginning God created the heaven and the earth", "--greedy", "--tokens",
                                    "24", "--ignore-end-of-turn", "--ids", "--chunk-tokens", "16", "--offload", "ram",
                                    "--threads", "1", "--sp", std::to_string(sp)};
  };
  const ProgramResult single = run_fpdt(join_args(sample_args(1)));
  ASSERT_EQ(single.exit_status, 0) << single.output;
  const ProgramResult two = run_mpi(mpirun_prefix(2), sample_args(2));
  ASSERT_EQ(two.exit_status, 0) << two.output;
  // Greedy tokens are argmaxes: a flip would need two logits within the fp32 rounding of the other
  // summation order (half the rows per GEMM, the attention's heads on two ranks) of each other.
  EXPECT_EQ(ids_line(two), ids_line(single));
  EXPECT_NE(two.output.find("2 rank(s)"), std::string::npos) << two.output;
  // The prompt from standard input, which mpirun gives to rank 0 alone: rank 0's, on both ranks.
  write_text_file(dir.file("prompt.txt"), "In the beginning God created the heaven and the earth");
  std::vector<std::string> from_stdin = sample_args(2);
  from_stdin[3] = "--prompt-file";
  from_stdin[4] = "-";
  std::string command;
  for (const std::string& word : mpirun_prefix(2)) command += "'" + word + "' ";
  const ProgramResult piped =
      run_command(command + "'" + fpdt_binary() + "' " + join_args(from_stdin) + " < " + dir.file("prompt.txt"));
  ASSERT_EQ(piped.exit_status, 0) << piped.output;
  EXPECT_EQ(ids_line(piped), ids_line(single));
}

}  // namespace
}  // namespace fpdt::testing

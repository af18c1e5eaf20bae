// The `fpdt` program's commands end to end: --help of each lists its options; tokenize → train →
// inspect → sample on a tiny model; and what a Hugging Face loader needs is in the checkpoint.
#include <gtest/gtest.h>

#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

TEST(Commands, EachCommandHasHelpListingItsOptions) {
  const ProgramResult top = run_fpdt("--help");
  EXPECT_EQ(top.exit_status, 0);
  for (const char* command : {"train", "sample", "tokenize", "inspect"}) {
    EXPECT_NE(top.output.find(command), std::string::npos) << top.output;
    const ProgramResult help = run_fpdt(std::string(command) + " --help");
    EXPECT_EQ(help.exit_status, 0) << help.output;
    EXPECT_NE(help.output.find("usage: fpdt " + std::string(command)), std::string::npos) << help.output;
  }
  EXPECT_NE(run_fpdt("train --help").output.find("--resume"), std::string::npos);
  EXPECT_EQ(run_fpdt("frobnicate").exit_status, 2);
}

TEST(Commands, TrainInspectAndSampleATinyModel) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  std::vector<std::string> args = setup.train_args(dir.file("run"), 6);
  args.insert(args.end(), {"--sample-tokens", "20", "--prompt", "the"});
  const ProgramResult trained = run_fpdt(join_args(args));
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  for (const char* expected : {"| model", "validation loss before training", "step     6/6", "end: validation loss",
                               "sample:", "mem "})
    EXPECT_NE(trained.output.find(expected), std::string::npos) << expected << " in\n" << trained.output;

  const ProgramResult inspected = run_fpdt("inspect " + dir.file("run"));
  EXPECT_EQ(inspected.exit_status, 0) << inspected.output;
  for (const char* expected : {"step_6", "\"step\": 6", "model.layers.1.mlp.down_proj.weight", "m.layers.0.attn.qkv.weight"})
    EXPECT_NE(inspected.output.find(expected), std::string::npos) << expected << " in\n" << inspected.output;
  const ProgramResult shard = run_fpdt("inspect " + setup.data_dir + "/train.bin");
  EXPECT_NE(shard.output.find("token shard version 1"), std::string::npos) << shard.output;

  const ProgramResult sampled =
      run_fpdt("sample --checkpoint " + dir.file("run") + " --prompt 'the light' --tokens 16 --context 32");
  EXPECT_EQ(sampled.exit_status, 0) << sampled.output;
  EXPECT_EQ(sampled.output.rfind("the light", 0), 0u) << sampled.output;  // the prompt, then 16 bytes
}

// `train --dry-run --schedule` prints the step's FPDT schedule, and the table says the chunk plan and
// its padding (S = 100 in chunks of 48: 3 chunks, 44 tokens of padding).
TEST(Commands, DryRunPrintsTheScheduleAndThePadding) {
  const TempDir dir;
  const ProgramResult run = run_fpdt("train --model llama-tiny --seq 100 --chunk-tokens 48 --recompute layer --dry-run "
                                     "--schedule --peak-gflops 1 --threads 1 --out " + dir.file("run"));
  ASSERT_EQ(run.exit_status, 0) << run.output;
  for (const char* expected : {"3 x 48 tokens (48 per rank), padding 44", "FPDT schedule: S 100 tokens (padded to 144)",
                               "recompute layer", "program layer backward", "attention block backward 2,1"})
    EXPECT_NE(run.output.find(expected), std::string::npos) << expected << " in\n" << run.output;
}

}  // namespace
}  // namespace fpdt::testing

// `fpdt train --mixture`: training rows drawn from several shard folders continue bitwise across a stop
// and --resume (the mixture's cursor is in the checkpoint), and a source of another tokenizer or a rule no
// document obeys is refused by name before the run starts.
#include <filesystem>
#include <string>

#include "cli/fpdt_program.h"
#include "testing.h"

namespace fpdt::testing {
namespace {

// Byte-token shards of `documents` documents of random words (2..40 of them each) in `folder`.
void write_source(const TempDir& dir, const std::string& name, Rng& rng, int documents) {
  const char* words[] = {"in", "the", "beginning", "was", "word", "light", "shined", "darkness"};
  std::string text;
  for (int d = 0; d < documents; ++d) {
    const std::string path = dir.file(name + std::to_string(d) + ".txt");
    text.clear();
    for (uint64_t w = 0, n = 2 + rng.below(39); w < n; ++w) text += std::string(words[rng.below(8)]) + " ";
    write_text_file(path, text + "\n");
  }
  std::string files;
  for (int d = 0; d < documents; ++d) files += " " + dir.file(name + std::to_string(d) + ".txt");
  const ProgramResult tokenized = run_fpdt("tokenize --out " + dir.file(name) + " --val-fraction 0.05" + files);
  ASSERT_EQ(tokenized.exit_status, 0) << tokenized.output;
}

TEST(MixtureTraining, StopAndResumeDrawTheSameRowsBitwise) {
  TempDir dir;
  const TinySetup tiny(dir, fresh_seed());
  Rng rng(fresh_seed());
  write_source(dir, "short", rng, 60);
  write_source(dir, "long", rng, 20);
  const std::string mixture = dir.file("short") + ":0.3:0:120," + dir.file("long") + ":0.7:100";
  const std::string common = "train --model " + tiny.config_path + " --data " + tiny.data_dir + " --mixture " + mixture +
                             " --steps 6 --batch 2 --seq 64 --doc-mask --threads 2 --peak-gflops 100 --eval-batches 1 "
                             "--eval-every 0 --save-every 2 --lr 1e-3 --warmup 1";
  const std::string straight = dir.file("straight"), stopped = dir.file("stopped");
  const ProgramResult whole = run_fpdt(common + " --out " + straight, 300);
  ASSERT_EQ(whole.exit_status, 0) << whole.output;
  const ProgramResult first = run_fpdt(common + " --out " + stopped + " --stop-after 3", 300);
  ASSERT_EQ(first.exit_status, 0) << first.output;
  const ProgramResult rest = run_fpdt(common + " --out " + stopped + " --resume", 300);
  ASSERT_EQ(rest.exit_status, 0) << rest.output;
  EXPECT_EQ(file_bytes(stopped + "/step_6/model.safetensors"), file_bytes(straight + "/step_6/model.safetensors"));
  EXPECT_EQ(logged_steps(stopped + "/metrics.jsonl"), logged_steps(straight + "/metrics.jsonl"));
}

TEST(MixtureTraining, BadSourcesAreRefusedBeforeTheRun) {
  TempDir dir;
  const TinySetup tiny(dir, fresh_seed());
  Rng rng(fresh_seed());
  write_source(dir, "short", rng, 20);
  const std::string base = "train --model " + tiny.config_path + " --data " + tiny.data_dir +
                           " --steps 2 --batch 1 --seq 64 --threads 2 --peak-gflops 100 --out " + dir.file("run");
  // No document of the source is as long as its rule asks.
  expect_one_clear_error(run_fpdt(base + " --mixture " + dir.file("short") + ":1:100000", 60),
                         {"mixture source " + dir.file("short"), "at least 100000 tokens"});
  // A folder without shards.
  expect_one_clear_error(run_fpdt(base + " --mixture " + dir.file("none") + ":1", 60), {dir.file("none") + "/train.bin"});
  // A malformed spelling.
  expect_one_clear_error(run_fpdt(base + " --mixture " + dir.file("short"), 60), {"is not DIR:WEIGHT"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("run") + "/latest"));
}

}  // namespace
}  // namespace fpdt::testing

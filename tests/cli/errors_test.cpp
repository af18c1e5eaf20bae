// Bad input to `fpdt train` and friends: a missing, truncated or corrupt checkpoint (trainer state,
// AdamW step count, non-finite weights), a shard that is missing or not a shard, shards of another
// tokenizer or vocabulary, an unsupported tokenizer, an unknown option or a
// value that makes no sense, options that contradict each other, an output directory that cannot be
// written, `fpdt inspect` on a pipe. Each gets one clear error line (the "[module] ...; hint: ..."
// format) and a non-zero exit, never a crash, a hang or "[internal]".
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "fpdt/base/machine.h"
#include "fpdt/tensor/safetensors.h"
#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

class TrainErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    setup_ = std::make_unique<TinySetup>(dir_, fresh_seed());
    run_ = dir_.file("run");
    const ProgramResult first = run_fpdt(join_args(setup_->train_args(run_, 5)));
    ASSERT_EQ(first.exit_status, 0) << first.output;
  }
  ProgramResult resume() {
    std::vector<std::string> args = setup_->train_args(run_, 10);
    args.push_back("--resume");
    return run_fpdt(join_args(args));
  }
  std::string checkpoint_file(const std::string& name) const { return run_ + "/step_5/" + name; }
  TempDir dir_;
  std::unique_ptr<TinySetup> setup_;
  std::string run_;
};

TEST_F(TrainErrors, MissingCheckpointFile) {
  std::filesystem::remove(checkpoint_file("model.safetensors"));
  expect_one_clear_error(resume(), {"[safetensors]", "model.safetensors", "cannot open"});
}

TEST_F(TrainErrors, TruncatedCheckpointFile) {
  std::filesystem::resize_file(checkpoint_file("optimizer-0-of-1.safetensors"),
                               std::filesystem::file_size(checkpoint_file("optimizer-0-of-1.safetensors")) / 2);
  expect_one_clear_error(resume(), {"optimizer-0-of-1.safetensors", "truncated"});
}

TEST_F(TrainErrors, CorruptCheckpointFile) {
  std::fstream file(checkpoint_file("model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(8);
  file.write("#garbage#", 9);  // inside the JSON header
  file.close();
  expect_one_clear_error(resume(), {"model.safetensors's header is not valid JSON"});
}

TEST_F(TrainErrors, TrainerStateOfAnotherVersion) {
  std::ifstream in(checkpoint_file("trainer_state.json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"version\": 2"), 12, "\"version\": 99");
  write_text_file(checkpoint_file("trainer_state.json"), text);
  expect_one_clear_error(resume(), {"trainer_state.json", "version 99", "reads versions 1 and 2"});
}

TEST_F(TrainErrors, CorruptTrainerState) {
  write_text_file(checkpoint_file("trainer_state.json"), "{\"format\": \"fpdt-trainer-state\", \"vers");
  expect_one_clear_error(resume(), {"trainer_state.json is not valid JSON"});
}

// optimizer-0-of-1.safetensors with its "step" metadata replaced (the header is rewritten whole, so its
// length may change; tensor offsets are relative to the end of the header).
void set_optimizer_step(const std::string& path, const std::string& step) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_bytes));
  header["__metadata__"]["step"] = step;
  const std::string text = header.dump();
  const uint64_t length = text.size();
  std::string rewritten(8, '\0');
  std::memcpy(rewritten.data(), &length, 8);
  write_text_file(path, rewritten + text + bytes.substr(8 + header_bytes));
}

TEST_F(TrainErrors, CorruptAdamWStepCount) {
  set_optimizer_step(checkpoint_file("optimizer-0-of-1.safetensors"), "-5");  // would turn the run into NaN
  expect_one_clear_error(resume(), {"[checkpoint]", "optimizer-0-of-1.safetensors is corrupt", "AdamW step '-5'"});
  set_optimizer_step(checkpoint_file("optimizer-0-of-1.safetensors"), "five");  // was "[internal] stoll"
  expect_one_clear_error(resume(), {"[checkpoint]", "optimizer-0-of-1.safetensors is corrupt", "AdamW step 'five'"});
  set_optimizer_step(checkpoint_file("optimizer-0-of-1.safetensors"), "6");  // more updates than steps
  expect_one_clear_error(resume(), {"[checkpoint]", "counts 6 AdamW updates, more than the 5 steps"});
}

TEST_F(TrainErrors, TrainerStateNestedTooDeep) {
  std::string nested = "{\"format\": \"fpdt-trainer-state\", \"settings\": ";
  nested += std::string(100000, '[') + std::string(100000, ']') + "}";
  write_text_file(checkpoint_file("trainer_state.json"), nested);
  expect_one_clear_error(resume(), {"trainer_state.json nests JSON deeper than 64 levels"});
  write_text_file(checkpoint_file("trainer_state.json"),
                  "{\"format\": \"fpdt-trainer-state\", \"version\": 1, \"step\": -3}");
  expect_one_clear_error(resume(), {"trainer_state.json is corrupt", "\"step\""});
}

TEST_F(TrainErrors, CheckpointWithNonFiniteWeights) {
  const std::string path = checkpoint_file("model.safetensors");
  SafetensorsReader reader(path);
  const SafetensorsEntry& entry = reader.entry(reader.names().front());
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_bytes = 0;
  file.read(reinterpret_cast<char*>(&header_bytes), 8);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  file.seekp(static_cast<std::streamoff>(8 + header_bytes + entry.begin_bytes));
  file.write(reinterpret_cast<const char*>(&nan), sizeof nan);
  file.close();
  expect_one_clear_error(resume(), {"[checkpoint]", "step_5 holds non-finite weights", "hint: resume from an earlier"});
}

TEST_F(TrainErrors, ShardThatIsNotAShard) {
  write_text_file(setup_->data_dir + "/train.bin", std::string(64, 'x'));
  expect_one_clear_error(run_fpdt(join_args(setup_->train_args(dir_.file("other"), 5))),
                         {"train.bin", "not an fpdt token shard"});
}

TEST_F(TrainErrors, MissingShard) {
  std::filesystem::remove(setup_->data_dir + "/val.bin");
  expect_one_clear_error(run_fpdt(join_args(setup_->train_args(dir_.file("other"), 5))), {"val.bin"});
}

TEST_F(TrainErrors, OutputDirectoryThatCannotBeWritten) {
  // sysfs refuses new entries to every user, root included.
  expect_one_clear_error(run_fpdt(join_args(setup_->train_args("/sys/fpdt_run", 5))), {"/sys/fpdt_run"});
}

TEST(OptionErrors, UnknownOptionAndBadValue) {
  expect_one_clear_error(run_fpdt("train --bogus 1"), {"unknown option --bogus", "fpdt train --help"});
  expect_one_clear_error(run_fpdt("train --steps many"), {"--steps must be a whole number, got 'many'"});
}

// Every numeric option is checked against its meaning before anything runs: one error naming it.
TEST(OptionErrors, ValuesThatMakeNoSense) {
  struct Case {
    const char* args;
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {"--beta1 2", {"[cli] --beta1 must be ≥ 0 and < 1, got '2'", "hint: --beta1 B1: AdamW beta1 (default 0.9)"}},
      {"--beta2 -1", {"[cli] --beta2 must be ≥ 0 and < 1, got '-1'"}},
      {"--lr inf", {"[cli] --lr must be a finite number, got 'inf'"}},
      {"--lr 0", {"[cli] --lr must be > 0, got '0'"}},
      {"--grad-clip -1", {"[cli] --grad-clip must be ≥ 0, got '-1'"}},
      {"--warmup -5", {"[cli] --warmup must be ≥ 0, got '-5'"}},
      {"--min-lr -1", {"[cli] --min-lr must be ≥ 0, got '-1'"}},
      {"--min-lr 0.1 --lr 0.01", {"[train] --min-lr 0.1 is above --lr 0.01"}},
      {"--threads -5", {"[cli] --threads must be ≥ 0 and ≤ " + std::to_string(machine_cores()) + ", got '-5'"}},
      {"--chunk-tokens -8", {"[cli] --chunk-tokens must be ≥ 0, got '-8'"}},
      {"--compute-mem 1e30TiB", {"[cli] --compute-mem must be at most 9223372036854775807 bytes, got '1e30TiB'"}},
      {"--steps 1e30", {"[cli] --steps must be at most 9223372036854775807, got '1e30'"}},
      {"--sp 0", {"[cli] --sp must be ≥ 1, got '0'"}},
      {"--seq 0", {"[cli] --seq must be ≥ 1, got '0'"}},
      {"--max-nonfinite-steps 0", {"[cli] --max-nonfinite-steps must be ≥ 1, got '0'"}},
      {"--offload tape", {"[cli] unknown --offload 'tape'", "none, ram, disk or disk:DIR"}},
      {"--precision fp16", {"[cli] unknown --precision 'fp16'", "fp32 or bf16"}},
      {"--chunks 1000 --seq 64", {"[train] --chunks 1000 leaves chunks without tokens", "use --chunks 64 or fewer"}},
      {"--chunk-tokens 8192 --seq 64", {"[train] --chunk-tokens 8192 is longer than the sequence of 64 tokens"}},
      {"--chunk-tokens 6 --sp 4", {"[train] --chunk-tokens 6 does not split over --sp 4 ranks"}},
      {"--sp 9 --dry-run",
       {"[ulysses] --sp 9 is more sequence-parallel ranks than the model's 8 attention heads", "at most 8"}},
      {"--batch 1e9", {"[train] the token buffers of one step", "more than this machine's", "lower --batch"}},
      {"--dry-run --seq 1e18", {"[train] --seq 1000000000000000000 is too long for 'llama-demo'"}},
      {"--mode fpdt-reference", {"[train] --mode fpdt-reference is the paper's implementation"}},
      {"--resume --overwrite", {"[train] --resume and --overwrite contradict each other"}},
  };
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.args);
    const ProgramResult result = run_fpdt(std::string("train ") + bad.args, 60);
    expect_one_clear_error(result, {});
    for (const std::string& part : bad.parts) EXPECT_NE(result.output.find(part), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find("[internal]"), std::string::npos) << result.output;
  }
}

TEST(InspectErrors, APipeIsRefusedNotWaitedOn) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("pipe").c_str(), 0600), 0);
  expect_one_clear_error(run_fpdt("inspect " + dir.file("pipe"), 60), {"[cli]", "pipe", "neither a file nor a folder"});
  expect_one_clear_error(run_fpdt("inspect " + dir.file("nothing"), 60), {"[cli]", "no such file or folder"});
}

// Shards of the Llama-3-style fixture tokenizer (501 ids) and of the GPT-2-style one, a model that fits
// them (vocab 512) and one that does not (the tiny setup's 257).
class TokenizerErrors : public TrainErrors {
 protected:
  void SetUp() override {
    TrainErrors::SetUp();
    const std::string fixtures = std::string(FPDT_SOURCE_DIR) + "/tests/data/fixtures/tokenizers/";
    std::string text;
    for (int i = 0; i < 300; ++i) text += "In the beginning God created the heaven and the earth.\n";
    write_text_file(dir_.file("text.txt"), text);
    for (const char* name : {"llama3", "gpt2"}) {
      const ProgramResult made = run_fpdt("tokenize --tokenizer " + fixtures + name + " --out " + dir_.file(name) + " " +
                                          dir_.file("text.txt"));
      ASSERT_EQ(made.exit_status, 0) << made.output;
    }
    write_text_file(dir_.file("wide.json"), R"({"model_type": "llama", "vocab_size": 512, "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})");
  }
  std::vector<std::string> wide_args(const std::string& data, const std::string& out) {
    std::vector<std::string> args = setup_->train_args(out, 2);
    args[2] = dir_.file("wide.json");
    args[4] = dir_.file(data);
    return args;
  }
};

TEST_F(TokenizerErrors, ModelVocabularyThatDoesNotFitTheShards) {
  std::vector<std::string> args = setup_->train_args(dir_.file("other"), 2);
  args[4] = dir_.file("llama3");
  expect_one_clear_error(run_fpdt(join_args(args)), {"[train]", "vocabulary of 501", "more than the model's 257"});
}

TEST_F(TokenizerErrors, ShardsOfAnotherTokenizerThanTheFolders) {
  std::filesystem::copy_file(dir_.file("gpt2/tokenizer.json"), dir_.file("llama3/tokenizer.json"),
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(dir_.file("llama3/tokenizer_config.json"));
  expect_one_clear_error(run_fpdt(join_args(wide_args("llama3", dir_.file("other")))),
                         {"[train]", "train.bin was made by another tokenizer", "re-run `fpdt tokenize`"});
  std::filesystem::remove(dir_.file("llama3/tokenizer.json"));
  expect_one_clear_error(run_fpdt(join_args(wide_args("llama3", dir_.file("other")))),
                         {"[train]", "holds no tokenizer.json"});
}

TEST_F(TokenizerErrors, TrainAndValidationShardsOfDifferentTokenizers) {
  std::filesystem::copy_file(dir_.file("gpt2/val.bin"), dir_.file("llama3/val.bin"),
                             std::filesystem::copy_options::overwrite_existing);
  expect_one_clear_error(run_fpdt(join_args(wide_args("llama3", dir_.file("other")))),
                         {"[train]", "were made by different tokenizers"});
}

TEST_F(TokenizerErrors, ResumingOnShardsOfAnotherTokenizer) {
  const ProgramResult first = run_fpdt(join_args(wide_args("llama3", dir_.file("wide_run"))));
  ASSERT_EQ(first.exit_status, 0) << first.output;
  std::vector<std::string> args = wide_args("gpt2", dir_.file("wide_run"));
  args[8] = "4";  // --steps
  args.push_back("--resume");
  expect_one_clear_error(run_fpdt(join_args(args)), {"[train]", "cannot resume", "trained on shards of tokenizer", "--data"});
}

// A folder's tokenizer_config.json naming an end-of-document token its tokenizer lacks: the hint says where
// the token is stated, not "--eos-token" alone, which train does not have (issue 45 case 6).
TEST_F(TokenizerErrors, AnEndOfDocumentTokenTheTokenizerLacksIsSaidWhereItIsStated) {
  write_text_file(dir_.file("gpt2/tokenizer_config.json"),
                  R"({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<nope>"})");
  expect_one_clear_error(run_fpdt(join_args(wide_args("gpt2", dir_.file("other")))),
                         {"[tokenizer]", "has no token '<nope>' to end documents with",
                          "hint: name a token of the tokenizer as eos_token in tokenizer_config.json",
                          "fpdt tokenize --eos-token"});
}

TEST_F(TokenizerErrors, UnsupportedOrMalformedTokenizerFiles) {
  const std::string fixtures = std::string(FPDT_SOURCE_DIR) + "/tests/data/fixtures/tokenizers/";
  expect_one_clear_error(run_fpdt("tokenize --tokenizer " + fixtures + "wordpiece --out " + dir_.file("x") + " " +
                                  dir_.file("text.txt")),
                         {"[tokenizer]", "model type 'WordPiece' is not supported"});
  write_text_file(dir_.file("broken.json"), "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  expect_one_clear_error(run_fpdt("tokenize --tokenizer " + dir_.file("broken.json") + " --out " + dir_.file("x") +
                                  " " + dir_.file("text.txt")),
                         {"[tokenizer]", "broken.json", "not a valid tokenizer.json"});
  expect_one_clear_error(run_fpdt("tokenize --eos-token x --out " + dir_.file("x") + " " + dir_.file("text.txt")),
                         {"[cli]", "--eos-token"});
}

}  // namespace
}  // namespace fpdt::testing

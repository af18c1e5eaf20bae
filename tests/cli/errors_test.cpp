// Bad input to `fpdt train` and friends: a missing, truncated or corrupt checkpoint, a shard that is
// missing or not a shard, an unknown option, an output directory that cannot be written. Each gets
// one clear error line (the "[module] ...; hint: ..." format) and a non-zero exit, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

// Exit status 1 and exactly one error line, which contains every part.
void expect_one_clear_error(const ProgramResult& result, std::initializer_list<std::string> parts) {
  EXPECT_EQ(result.exit_status, 1) << result.output;
  int error_lines = 0;
  std::string error_line;
  size_t begin = 0;
  while (begin < result.output.size()) {
    size_t end = result.output.find('\n', begin);
    if (end == std::string::npos) end = result.output.size();
    const std::string line = result.output.substr(begin, end - begin);
    if (line.starts_with("[") && line.find("] ") != std::string::npos && !line.starts_with("[ ")) {
      ++error_lines;
      error_line = line;
    }
    begin = end + 1;
  }
  EXPECT_EQ(error_lines, 1) << result.output;
  for (const std::string& part : parts) EXPECT_NE(error_line.find(part), std::string::npos) << "'" << part << "' not in: " << error_line;
  EXPECT_EQ(result.output.find("terminate called"), std::string::npos) << result.output;
}

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
  std::filesystem::resize_file(checkpoint_file("optimizer.safetensors"),
                               std::filesystem::file_size(checkpoint_file("optimizer.safetensors")) / 2);
  expect_one_clear_error(resume(), {"optimizer.safetensors", "truncated"});
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
  text.replace(text.find("\"version\": 1"), 12, "\"version\": 99");
  write_text_file(checkpoint_file("trainer_state.json"), text);
  expect_one_clear_error(resume(), {"trainer_state.json", "version 99", "reads version 1"});
}

TEST_F(TrainErrors, CorruptTrainerState) {
  write_text_file(checkpoint_file("trainer_state.json"), "{\"format\": \"fpdt-trainer-state\", \"vers");
  expect_one_clear_error(resume(), {"trainer_state.json is not valid JSON"});
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

TEST_F(TrainErrors, UnknownOptionAndBadValue) {
  expect_one_clear_error(run_fpdt("train --bogus 1"), {"unknown option --bogus", "fpdt train --help"});
  expect_one_clear_error(run_fpdt("train --steps many"), {"--steps expects a whole number, got 'many'"});
}

}  // namespace
}  // namespace fpdt::testing

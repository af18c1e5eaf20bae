// Checkpoints: save/load round-trips weights, moments and state bitwise; the folder is one Hugging
// Face tools can load (config.json + model.safetensors with HF names); a save that fails part way
// (the disk fills up) leaves the previous checkpoint and `latest` untouched; weights or moments that
// are not finite are never saved (so rotation never deletes the last finite checkpoint) nor loaded. Checkpoints carry the
// tokenizer they were trained with; another one in their place, or none, is one clear error.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <limits>
#include <filesystem>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/model/transformer.h"
#include "fpdt/tensor/safetensors.h"
#include "fpdt/train/checkpoint.h"
#include "testing.h"

namespace fpdt::train {
namespace {

struct Fixture {
  model::ModelConfig config;
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Transformer model;
  AdamW optimizer;
  Tokenizer tokenizer = Tokenizer::bytes();
  explicit Fixture(uint64_t seed, model::ModelConfig model_config = model::preset("llama-tiny"))
      : config(model_config), model(config, *backend, seed), optimizer(model.layout(), *backend, {}) {
    Rng rng(seed);
    for (float* block : {optimizer.m().data(), optimizer.v().data()})
      for (int64_t i = 0; i < optimizer.m().numel(); ++i) block[i] = static_cast<float>(rng.uniform());
    optimizer.set_step(1);  // not the default, and no more updates than any saved step
  }
  bool same_as(Fixture& other) {
    const size_t bytes = sizeof(float) * static_cast<size_t>(model.params().numel());
    return std::memcmp(model.params().data(), other.model.params().data(), bytes) == 0 &&
           std::memcmp(optimizer.m().data(), other.optimizer.m().data(), bytes) == 0 &&
           std::memcmp(optimizer.v().data(), other.optimizer.v().data(), bytes) == 0 &&
           optimizer.step() == other.optimizer.step();
  }
};

TrainerState state_at(int64_t step) {
  TrainerState state;
  state.step = step;
  state.seed = 99;
  state.data.rng_state[0] = 1;
  state.data.rng_state[1] = 2;
  state.data.rng_state[2] = 3;
  state.data.rng_state[3] = 0xffffffffffffffffull;  // full 64-bit words survive JSON
  state.data.batches_served = 5;
  state.data.shard_tokens = 1234;
  state.data.batch_size = 2;
  state.data.seq_tokens = 16;
  return state;
}

TEST(Checkpoint, RoundTripsBitwiseAndIsAHuggingFaceFolder) {
  testing::TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  Fixture saved(seed), loaded(seed + 1);
  save_checkpoint(dir.path(), saved.config, saved.model.layout(), saved.model.params(), saved.optimizer, state_at(3),
                  saved.tokenizer);
  const std::string folder = latest_checkpoint(dir.path());
  EXPECT_EQ(folder, dir.file("step_3"));
  const TrainerState state =
      load_checkpoint(folder, loaded.config, loaded.model.layout(), loaded.model.params(), loaded.optimizer);
  EXPECT_TRUE(saved.same_as(loaded));
  EXPECT_EQ(state.step, 3);
  EXPECT_EQ(state.data.rng_state[3], 0xffffffffffffffffull);
  EXPECT_EQ(state.data.shard_tokens, 1234u);
  // What Hugging Face's from_pretrained reads: config.json and HF tensor names.
  EXPECT_EQ(model::load_hf_config(folder + "/config.json").parameter_count(), saved.config.parameter_count());
  SafetensorsReader weights(folder + "/model.safetensors");
  EXPECT_TRUE(weights.contains("model.layers.1.self_attn.k_proj.weight"));
  EXPECT_TRUE(weights.contains("lm_head.weight"));
  EXPECT_EQ(weights.names().size(), model::hf_tensor_map(saved.config).size());
}

TEST(Checkpoint, KeepsOnlyTheNewestFolders) {
  testing::TempDir dir;
  Fixture fixture(testing::fresh_seed());
  for (int64_t step : {1, 2, 3})
    save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                    state_at(step), fixture.tokenizer, /*keep=*/2);
  EXPECT_FALSE(std::filesystem::exists(dir.file("step_1")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step_2")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step_3")));
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousCheckpointIntact) {
  testing::TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  Fixture fixture(seed), loaded(seed + 1);
  save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                  state_at(10), fixture.tokenizer);
  // Simulate a disk that fills up: no file of this process may grow past 64 KiB (writes then fail with
  // EFBIG instead of SIGXFSZ killing us), so the model file of the next save cannot be written.
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string message = testing::error_message([&] {
    save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                    state_at(20), fixture.tokenizer);
  });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  testing::expect_contains(message, {"cannot write", "step_20.partial/model.safetensors"});

  EXPECT_EQ(latest_checkpoint(dir.path()), dir.file("step_10"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("step_20")));
  load_checkpoint(latest_checkpoint(dir.path()), loaded.config, loaded.model.layout(), loaded.model.params(),
                  loaded.optimizer);
  EXPECT_TRUE(fixture.same_as(loaded));
}

TEST(Checkpoint, NonFiniteStateIsNeverSavedNorLoaded) {
  testing::TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  Fixture fixture(seed), loaded(seed + 1);
  for (int64_t step : {1, 2})
    save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                    state_at(step), fixture.tokenizer, /*keep=*/2);
  const float good = fixture.model.params().data()[5];
  // A weight, then a first moment, then a negative second moment: each save is refused, and neither
  // a step folder nor a rotation happens (step_1 and step_2 stay, latest stays at step_2).
  float* const poisoned[] = {fixture.model.params().data() + 5, fixture.optimizer.m().data() + 5,
                             fixture.optimizer.v().data() + 5};
  const float poisons[] = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -1.0f};
  for (int i = 0; i < 3; ++i) {
    const float kept = *poisoned[i];
    *poisoned[i] = poisons[i];
    testing::expect_contains(testing::error_message([&] {
                               save_checkpoint(dir.path(), fixture.config, fixture.model.layout(),
                                               fixture.model.params(), fixture.optimizer, state_at(3), fixture.tokenizer, 2);
                             }),
                             {"[checkpoint]", "refusing to save step_3", "finite"});
    *poisoned[i] = kept;
    EXPECT_FALSE(std::filesystem::exists(dir.file("step_3")));
    EXPECT_FALSE(std::filesystem::exists(dir.file("step_3.partial")));
    EXPECT_TRUE(std::filesystem::exists(dir.file("step_1")));
    EXPECT_EQ(latest_checkpoint(dir.path()), dir.file("step_2"));
  }
  EXPECT_EQ(fixture.model.params().data()[5], good);
  load_checkpoint(dir.file("step_2"), loaded.config, loaded.model.layout(), loaded.model.params(), loaded.optimizer);
  EXPECT_TRUE(fixture.same_as(loaded));
}

TEST(Checkpoint, RefusesAnAdamWStepCountThatIsNotOne) {
  testing::TempDir dir;
  Fixture fixture(testing::fresh_seed());
  fixture.optimizer.set_step(-5);  // bias correction 1 − β^−5 < 0: every update would be NaN
  save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                  state_at(4), fixture.tokenizer);
  testing::expect_contains(testing::error_message([&] {
                             load_checkpoint(dir.file("step_4"), fixture.config, fixture.model.layout(),
                                             fixture.model.params(), fixture.optimizer);
                           }),
                           {"[checkpoint]", "step_4/optimizer.safetensors is corrupt", "AdamW step '-5'"});
}

TEST(Checkpoint, RefusesACheckpointOfAnotherModel) {
  testing::TempDir dir;
  Fixture fixture(testing::fresh_seed());
  save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                  state_at(1), fixture.tokenizer);
  model::ModelConfig other = fixture.config;
  other.layers = 3;
  auto backend = kernels::make_backend("cpu");
  model::Transformer model(other, *backend);
  AdamW optimizer(model.layout(), *backend, {});
  testing::expect_contains(testing::error_message([&] {
                             load_checkpoint(dir.file("step_1"), other, model.layout(), model.params(), optimizer);
                           }),
                           {"another configuration", "step_1"});
}

TEST(Checkpoint, CarriesItsTokenizer) {
  testing::TempDir dir;
  model::ModelConfig config = model::preset("llama-tiny");
  config.vocab_size = 512;
  Fixture fixture(testing::fresh_seed(), config);
  const std::string fixtures = std::string(FPDT_SOURCE_DIR) + "/tests/train/fixtures/tokenizers";
  const Tokenizer tokenizer = Tokenizer::load(fixtures + "/llama3");  // 500 ids, the model has more
  ASSERT_LE(tokenizer.vocab_size(), fixture.config.vocab_size);
  save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                  state_at(1), tokenizer);
  const std::string step = dir.file("step_1");
  EXPECT_EQ(checkpoint_tokenizer(step, fixture.config.vocab_size).fingerprint(), tokenizer.fingerprint());
  EXPECT_EQ(Tokenizer::load(step).end_of_document_token(), "<|end_of_text|>");  // tokenizer_config.json came along

  // Another tokenizer put in its place.
  std::filesystem::remove(step + "/tokenizer_config.json");
  std::filesystem::copy_file(fixtures + "/gpt2/tokenizer.json", step + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  testing::expect_contains(testing::error_message([&] { checkpoint_tokenizer(step, fixture.config.vocab_size); }),
                           {"[checkpoint]", "another tokenizer", "than the one the model was trained with"});
  // A model too small for the tokenizer's ids.
  std::filesystem::copy_file(fixtures + "/llama3/tokenizer.json", step + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  testing::expect_contains(testing::error_message([&] { checkpoint_tokenizer(step, 300); }),
                           {"ids up to", "beyond the model's vocabulary of 300"});
  // A fingerprint that is not one (was "is corrupt: stoull", or a partial read of "12xyz").
  const std::string state_path = step + "/trainer_state.json";
  nlohmann::json state = nlohmann::json::parse(read_text_file(state_path, "test", ""));
  for (const nlohmann::json& bad : {nlohmann::json("xyz"), nlohmann::json("0x12xyz"), nlohmann::json("-1"),
                                    nlohmann::json(""), nlohmann::json(12), nlohmann::json("0x" + std::string(17, 'f'))}) {
    SCOPED_TRACE(bad.dump());
    nlohmann::json corrupt = state;
    corrupt["tokenizer_fingerprint"] = bad;
    testing::write_text_file(state_path, corrupt.dump());
    testing::expect_contains(testing::error_message([&] { checkpoint_tokenizer(step, fixture.config.vocab_size); }),
                             {"[checkpoint]", state_path + " is corrupt", "\"tokenizer_fingerprint\"",
                              "not a hexadecimal fingerprint"});
  }
  testing::write_text_file(state_path, state.dump());
  EXPECT_EQ(checkpoint_tokenizer(step, fixture.config.vocab_size).fingerprint(), tokenizer.fingerprint());
  // No tokenizer: the byte tokenizer when the model's vocabulary is its 257, else an error.
  std::filesystem::remove(step + "/tokenizer.json");
  EXPECT_TRUE(checkpoint_tokenizer(step, 257).is_byte_tokenizer());
  testing::expect_contains(testing::error_message([&] { checkpoint_tokenizer(step, fixture.config.vocab_size); }),
                           {"carries no tokenizer.json", "hint:"});
}

TEST(Checkpoint, CorruptTrainerStateGivesOneBoundedError) {
  const std::string huge(1 << 20, 'x');
  for (const std::string& text : {R"({"format": "fpdt-trainer-state", "settings": )" + std::string(100000, '[') +
                                      std::string(100000, ']') + "}",
                                  R"({"format": ")" + huge + R"("})", R"({"format": [")" + huge + R"("]})",
                                  std::string("{\"format\": \"") + huge}) {
    const std::string message =
        testing::error_message([&] { parse_trainer_state(text, "run/step_5/trainer_state.json"); });
    testing::expect_contains(message, {"[checkpoint] run/step_5/trainer_state.json"});
    EXPECT_LT(message.size(), 1000u) << message;
  }
  // Numbers out of their field's range: a float beyond uint64 made nlohmann's conversion undefined.
  const std::string state = R"({"format": "fpdt-trainer-state", "version": 1, "step": STEP, "seed": 3,
    "data_cursor": {"rng_state": [1, 2, 3, RNG], "batches_served": 0, "next_window": 0, "epoch": 0,
    "shard_tokens": 9, "batch_size": 1, "seq_tokens": 8, "sampling": 0}, "settings": {}})";
  auto with = [&](const std::string& step, const std::string& rng) {
    std::string text = state;
    text.replace(text.find("STEP"), 4, step);
    text.replace(text.find("RNG"), 3, rng);
    return text;
  };
  EXPECT_EQ(parse_trainer_state(with("5", "4"), "t.json").step, 5);
  struct Case {
    std::string step, rng, part;
  };
  for (const Case& c : std::vector<Case>{
           {"1e30", "4", "t.json is corrupt: \"step\" is 1e+30, not a whole number"},
           {"2.5", "4", "t.json is corrupt: \"step\" is 2.5"},
           {"\"5\"", "4", "t.json is corrupt: \"step\" is \"5\""},
           {"5", "7.3e22", "t.json is corrupt: \"rng_state\" is 7.3e+22"},
           {"5", "-1", "t.json is corrupt: \"rng_state\" is -1, not a whole number in [0, 18446744073709551615]"}})
    testing::expect_contains(testing::error_message([&] { parse_trainer_state(with(c.step, c.rng), "t.json"); }),
                             {"[checkpoint] " + c.part});
}

}  // namespace
}  // namespace fpdt::train

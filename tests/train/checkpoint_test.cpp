// Checkpoints: save/load round-trips weights, moments and state bitwise; the folder is one Hugging
// Face tools can load (config.json + model.safetensors with HF names); and a save that fails part way
// (the disk fills up) leaves the previous checkpoint and `latest` untouched.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/transformer.h"
#include "fpdt/tensor/safetensors.h"
#include "fpdt/train/checkpoint.h"
#include "testing.h"

namespace fpdt::train {
namespace {

struct Fixture {
  model::ModelConfig config = model::preset("llama-tiny");
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend("cpu");
  model::Transformer model;
  AdamW optimizer;
  explicit Fixture(uint64_t seed) : model(config, *backend, seed), optimizer(model.layout(), *backend, {}) {
    Rng rng(seed);
    for (float* block : {optimizer.m().data(), optimizer.v().data()})
      for (int64_t i = 0; i < optimizer.m().numel(); ++i) block[i] = static_cast<float>(rng.uniform());
    optimizer.set_step(7);
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
  save_checkpoint(dir.path(), saved.config, saved.model.layout(), saved.model.params(), saved.optimizer, state_at(3));
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
                    state_at(step), /*keep=*/2);
  EXPECT_FALSE(std::filesystem::exists(dir.file("step_1")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step_2")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step_3")));
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousCheckpointIntact) {
  testing::TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  Fixture fixture(seed), loaded(seed + 1);
  save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                  state_at(10));
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
                    state_at(20));
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

TEST(Checkpoint, RefusesACheckpointOfAnotherModel) {
  testing::TempDir dir;
  Fixture fixture(testing::fresh_seed());
  save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                  state_at(1));
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
  for (const Case& c : std::vector<Case>{{"1e30", "4", "t.json: step is 1e+30, not a whole number"},
                                         {"2.5", "4", "t.json: step is 2.5"},
                                         {"\"5\"", "4", "t.json: step is \"5\""},
                                         {"5", "7.3e22", "t.json: rng_state is 7.3e+22"},
                                         {"5", "-1", "t.json: rng_state is -1, not a whole number in [0, 18446744073709551615]"}})
    testing::expect_contains(testing::error_message([&] { parse_trainer_state(with(c.step, c.rng), "t.json"); }),
                             {"[checkpoint] " + c.part});
}

}  // namespace
}  // namespace fpdt::train

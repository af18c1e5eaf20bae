// Checkpoints: save/load round-trips weights, moments and state bitwise; the folder is one Hugging
// Face tools can load (config.json + model.safetensors with HF names); a save that fails part way
// (the disk fills up) leaves the previous checkpoint and `latest` untouched; weights or moments that
// are not finite are never saved (so rotation never deletes the last finite checkpoint) nor loaded.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <limits>
#include <filesystem>

#include "fpdt/base/error.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/hf_checkpoint.h"
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

TEST(Checkpoint, NonFiniteStateIsNeverSavedNorLoaded) {
  testing::TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  Fixture fixture(seed), loaded(seed + 1);
  for (int64_t step : {1, 2})
    save_checkpoint(dir.path(), fixture.config, fixture.model.layout(), fixture.model.params(), fixture.optimizer,
                    state_at(step), /*keep=*/2);
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
                                               fixture.model.params(), fixture.optimizer, state_at(3), 2);
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
                  state_at(4));
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

}  // namespace
}  // namespace fpdt::train

// Checkpoints: save/load round-trips weights, moments and state bitwise; the folder is one Hugging
// Face tools can load (config.json + model.safetensors with HF names); a save that fails part way
// (the disk fills up) leaves the previous checkpoint and `latest` untouched; weights or moments that
// are not finite are never saved (so rotation never deletes the last finite checkpoint) nor loaded. Checkpoints carry the
// tokenizer they were trained with; another one in their place, or none, is one clear error. Optimizer
// shards saved by one ZeRO partition load into any other (world size, stage), bitwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/tensor/safetensors.h"
#include "fpdt/train/checkpoint.h"
#include "testing.h"

namespace fpdt::train {
namespace {

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

// Everything a checkpoint holds of the states of `world`'s ranks, in one order whatever the partition:
// the whole weights, then each unit's m and v (every rank's share, gathered in rank order).
std::vector<float> snapshot(pipeline::ModelStates& states, comm::Communicator& world) {
  model::ParameterBlock weights(states.layout(), "snapshot", Tier::offload);
  states.gather_weights(weights);
  std::vector<float> all(weights.data(), weights.data() + weights.numel());
  for (size_t u = 0; u < states.layout().units().size(); ++u) {
    const int unit = static_cast<int>(u);
    const int64_t n = states.layout().units()[u].numel();
    std::vector<float> m(static_cast<size_t>(states.own(unit).size())), v(m.size());
    states.read_moments(unit, m.data(), v.data());
    std::vector<float> unit_m = m, unit_v = v;
    if (states.partition_ranks() > 1) {
      std::vector<size_t> bytes;
      for (int r = 0; r < states.partition_ranks(); ++r)
        bytes.push_back(static_cast<size_t>(pipeline::shard_range(n, states.partition_ranks(), r).size()) *
                        sizeof(float));
      unit_m.resize(static_cast<size_t>(n));
      unit_v.resize(static_cast<size_t>(n));
      world.all_gather_v(m.data(), unit_m.data(), bytes.data());
      world.all_gather_v(v.data(), unit_v.data(), bytes.data());
    }
    all.insert(all.end(), unit_m.begin(), unit_m.end());
    all.insert(all.end(), unit_v.begin(), unit_v.end());
  }
  return all;
}

// Random moments (m any sign, v ≥ 0) for every rank's share: a pure function of the seed, so every
// partition of the same seed holds the same values.
void random_moments(pipeline::ModelStates& states, uint64_t seed) {
  for (size_t u = 0; u < states.layout().units().size(); ++u) {
    const int unit = static_cast<int>(u);
    Rng rng(seed + u);
    std::vector<float> m(static_cast<size_t>(states.layout().units()[u].numel())), v(m.size());
    for (size_t i = 0; i < m.size(); ++i) {
      m[i] = static_cast<float>(rng.normal());
      v[i] = static_cast<float>(rng.uniform());
    }
    const pipeline::ShardRange own = states.own(unit);
    states.write_moments(unit, m.data() + own.begin, v.data() + own.begin);
  }
}

// One rank's model states (ZeRO stage 0) with random moments, and an optimizer one update in.
struct Fixture {
  model::ModelConfig config;
  std::unique_ptr<kernels::Backend> backend = kernels::make_backend(kernels::BackendKind::cpu);
  std::unique_ptr<comm::Communicator> world = comm::make_local();
  pipeline::ModelStates states;
  AdamW optimizer{OptimizerConfig{}};
  data::Tokenizer tokenizer = data::Tokenizer::bytes();
  explicit Fixture(uint64_t seed, model::ModelConfig model_config = model::preset("llama-tiny"))
      : config(model_config), states(config, *backend, *world, pipeline::RunSpec{}, seed) {
    random_moments(states, seed);
    optimizer.set_step(1);  // not the default, and no more updates than any saved step
  }
  bool same_as(Fixture& other) {
    const std::vector<float> mine = snapshot(states, *world), theirs = snapshot(other.states, *other.world);
    return mine.size() == theirs.size() &&
           std::memcmp(mine.data(), theirs.data(), mine.size() * sizeof(float)) == 0 &&
           optimizer.step() == other.optimizer.step();
  }
  void save(const testing::TempDir& dir, int64_t step, int keep = kKeptCheckpoints) {
    save_checkpoint(dir.path(), {config, states, optimizer, tokenizer, ""}, state_at(step), *world, keep);
  }
  TrainerState load(const std::string& folder) { return load_checkpoint(folder, config, states, optimizer); }
  // Sets element `index` of unit 0's first moment or second moment (which: 0 m, 1 v); returns the old.
  float set_moment(int which, size_t index, float value) {
    std::vector<float> m(static_cast<size_t>(states.own(0).size())), v(m.size());
    states.read_moments(0, m.data(), v.data());
    float& slot = (which == 0 ? m : v)[index];
    const float old = slot;
    slot = value;
    states.write_moments(0, m.data(), v.data());
    return old;
  }
};

TEST(Checkpoint, RoundTripsBitwiseAndIsAHuggingFaceFolder) {
  testing::TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  Fixture saved(seed), loaded(seed + 1);
  saved.save(dir, 3);
  const std::string folder = latest_checkpoint(dir.path());
  EXPECT_EQ(folder, dir.file("step_3"));
  const TrainerState state = loaded.load(folder);
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
  EXPECT_EQ(optimizer_files(folder), std::vector<std::string>{folder + "/optimizer-0-of-1.safetensors"});
}

TEST(Checkpoint, KeepsOnlyTheNewestFolders) {
  testing::TempDir dir;
  Fixture fixture(testing::fresh_seed());
  for (int64_t step : {1, 2, 3}) fixture.save(dir, step, /*keep=*/2);
  EXPECT_FALSE(std::filesystem::exists(dir.file("step_1")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step_2")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step_3")));
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousCheckpointIntact) {
  testing::TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  Fixture fixture(seed), loaded(seed + 1);
  fixture.save(dir, 10);
  // Simulate a disk that fills up: no file of this process may grow past 64 KiB (writes then fail with
  // EFBIG instead of SIGXFSZ killing us), so the model file of the next save cannot be written.
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string message = testing::error_message([&] { fixture.save(dir, 20); });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  testing::expect_contains(message, {"cannot write", "step_20.partial/"});

  EXPECT_EQ(latest_checkpoint(dir.path()), dir.file("step_10"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("step_20")));
  loaded.load(latest_checkpoint(dir.path()));
  EXPECT_TRUE(fixture.same_as(loaded));
}

TEST(Checkpoint, NonFiniteStateIsNeverSavedNorLoaded) {
  testing::TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  Fixture fixture(seed), loaded(seed + 1);
  for (int64_t step : {1, 2}) fixture.save(dir, step, /*keep=*/2);
  float* weight = fixture.states.weights().data() + 5;
  const float good = *weight;
  // A weight, then a first moment, then a negative second moment: each save is refused, and neither
  // a step folder nor a rotation happens (step_1 and step_2 stay, latest stays at step_2).
  const float poisons[] = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -1.0f};
  for (int i = 0; i < 3; ++i) {
    float kept = 0.0f;
    if (i == 0) {
      kept = *weight;
      *weight = poisons[i];
    } else {
      kept = fixture.set_moment(i - 1, 5, poisons[i]);
    }
    testing::expect_contains(testing::error_message([&] { fixture.save(dir, 3, 2); }),
                             {"[checkpoint]", "refusing to save step_3", "finite"});
    if (i == 0)
      *weight = kept;
    else
      fixture.set_moment(i - 1, 5, kept);
    EXPECT_FALSE(std::filesystem::exists(dir.file("step_3")));
    EXPECT_FALSE(std::filesystem::exists(dir.file("step_3.partial")));
    EXPECT_TRUE(std::filesystem::exists(dir.file("step_1")));
    EXPECT_EQ(latest_checkpoint(dir.path()), dir.file("step_2"));
  }
  EXPECT_EQ(*weight, good);
  loaded.load(dir.file("step_2"));
  EXPECT_TRUE(fixture.same_as(loaded));
}

TEST(Checkpoint, RefusesAnAdamWStepCountThatIsNotOne) {
  testing::TempDir dir;
  Fixture fixture(testing::fresh_seed());
  fixture.optimizer.set_step(-5);  // bias correction 1 − β^−5 < 0: every update would be NaN
  fixture.save(dir, 4);
  testing::expect_contains(testing::error_message([&] { fixture.load(dir.file("step_4")); }),
                           {"[checkpoint]", "step_4/optimizer-0-of-1.safetensors is corrupt", "AdamW step '-5'"});
}

TEST(Checkpoint, RefusesACheckpointOfAnotherModel) {
  testing::TempDir dir;
  Fixture fixture(testing::fresh_seed());
  fixture.save(dir, 1);
  model::ModelConfig other = fixture.config;
  other.layers = 3;
  Fixture loaded(1, other);
  testing::expect_contains(testing::error_message([&] { loaded.load(dir.file("step_1")); }),
                           {"another configuration", "step_1", "num_hidden_layers = 2", "model 3"});
}

TEST(Checkpoint, ConfigJsonStatesTheTokenizersGenerationIdsWhereTheModelStatesNone) {
  testing::TempDir dir;
  Fixture fixture(testing::fresh_seed());  // llama-tiny: no generation ids of its own
  ASSERT_FALSE(fixture.config.eos_token_id.has_value());
  fixture.save(dir, 1);
  // The byte tokenizer: its end-of-document token ends generation; it has no bos or pad token.
  const nlohmann::json saved = nlohmann::json::parse(read_text_file(dir.file("step_1/config.json"), "test", ""));
  EXPECT_EQ(saved["eos_token_id"], data::kEndOfDocumentId);
  for (const char* key : {"bos_token_id", "pad_token_id"})
    EXPECT_TRUE(saved.contains(key) && saved[key].is_null()) << key;
  EXPECT_FALSE(std::filesystem::exists(dir.file("step_1/generation_config.json")));  // none given
  // It resumes with the model config that states none; ids both state must agree.
  fixture.load(dir.file("step_1"));
  Fixture stated(1, fixture.config);
  stated.config.eos_token_id = model::TokenIds{{7}, false};
  testing::expect_contains(testing::error_message([&] { stated.load(dir.file("step_1")); }),
                           {"another configuration", "eos_token_id = 256", "model 7"});
  // Ids the model states are the checkpoint's, and a generation_config.json is carried as it is.
  const std::string generation = "{\"do_sample\": true, \"eos_token_id\": [1, 2]}";
  save_checkpoint(dir.path(), {stated.config, stated.states, stated.optimizer, stated.tokenizer, generation},
                  state_at(2), *stated.world);
  EXPECT_EQ(nlohmann::json::parse(read_text_file(dir.file("step_2/config.json"), "test", ""))["eos_token_id"], 7);
  EXPECT_EQ(read_text_file(dir.file("step_2/generation_config.json"), "test", ""), generation);
  EXPECT_EQ(model::read_generation_config(dir.file("step_2")), generation);
  EXPECT_EQ(model::read_generation_config(dir.file("step_1")), "");
  testing::write_text_file(dir.file("step_1/generation_config.json"), "[1]");
  testing::expect_contains(testing::error_message([&] { model::read_generation_config(dir.file("step_1")); }),
                           {"[model]", "step_1/generation_config.json is not a JSON object"});
}

// The states of a run saved by one ZeRO partition — any W, any stage — load into another bitwise: each
// rank reads its share of the moments from the shards that hold it. The same seed gives every
// partition the same weights and moments, so every snapshot must equal the one-rank stage-0 one.
TEST(Checkpoint, OptimizerShardsLoadIntoAnyWorldSizeAndStage) {
  testing::TempDir dir;
  const uint64_t seed = testing::fresh_seed();
  const model::ModelConfig config = model::preset("gpt-tiny");  // a learned position table and biases
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  std::vector<float> want;
  {
    auto world = comm::make_local();
    pipeline::ModelStates states(config, *backend, *world, pipeline::RunSpec{}, seed);
    random_moments(states, seed);
    want = snapshot(states, *world);
  }
  struct Layout {
    int ranks, stage;
    pipeline::RunSpec run() const {
      pipeline::RunSpec at_stage;
      at_stage.zero = stage;
      return at_stage;
    }
  };
  const Layout layouts[] = {{2, 1}, {3, 3}, {1, 0}, {4, 2}, {2, 3}};
  for (const Layout& from : layouts)
    for (const Layout& to : layouts) {
      SCOPED_TRACE("saved by " + std::to_string(from.ranks) + " ranks at stage " + std::to_string(from.stage) +
                   ", loaded by " + std::to_string(to.ranks) + " at stage " + std::to_string(to.stage));
      const std::string run = dir.file("from" + std::to_string(from.ranks) + "x" + std::to_string(from.stage));
      if (!std::filesystem::exists(run))
        comm::run_ranks(from.ranks, [&](comm::Communicator& world) {
          pipeline::ModelStates states(config, *backend, world, from.run(), seed);
          random_moments(states, seed);
          AdamW optimizer{OptimizerConfig{}};
          optimizer.set_step(2);
          save_checkpoint(run, {config, states, optimizer, data::Tokenizer::bytes(), ""}, state_at(2), world);
        });
      EXPECT_EQ(optimizer_files(run + "/step_2").size(), static_cast<size_t>(from.stage >= 1 ? from.ranks : 1));
      std::mutex mutex;
      comm::run_ranks(to.ranks, [&](comm::Communicator& world) {
        pipeline::ModelStates states(config, *backend, world, to.run(), seed + 1);
        AdamW optimizer{OptimizerConfig{}};
        load_checkpoint(run + "/step_2", config, states, optimizer);
        const std::vector<float> got = snapshot(states, world);
        std::lock_guard<std::mutex> lock(mutex);
        EXPECT_EQ(optimizer.step(), 2);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << "rank " << world.rank();
      });
    }
}

TEST(Checkpoint, CarriesItsTokenizer) {
  testing::TempDir dir;
  model::ModelConfig config = model::preset("llama-tiny");
  config.vocab_size = 512;
  Fixture fixture(testing::fresh_seed(), config);
  const std::string fixtures = std::string(FPDT_SOURCE_DIR) + "/tests/data/fixtures/tokenizers";
  const data::Tokenizer tokenizer = data::Tokenizer::load(fixtures + "/llama3");  // 500 ids, the model has more
  ASSERT_LE(tokenizer.vocab_size(), fixture.config.vocab_size);
  fixture.tokenizer = data::Tokenizer::load(fixtures + "/llama3");
  fixture.save(dir, 1);
  const std::string step = dir.file("step_1");
  EXPECT_EQ(checkpoint_tokenizer(step, fixture.config.vocab_size).fingerprint(), tokenizer.fingerprint());
  // tokenizer_config.json came along
  EXPECT_EQ(data::Tokenizer::load(step).end_of_document_token(), "<|end_of_text|>");

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

// Checkpoint save and load (see checkpoint.h).
#include "fpdt/train/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/json.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/tensor/safetensors.h"

namespace fpdt::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModule = "checkpoint";
constexpr const char* kStateFormat = "fpdt-trainer-state";
constexpr int kStateVersion = 2;           // 2: optimizer shards and their partition; 1: optimizer.safetensors
constexpr const char* kShardFormat = "fpdt-adamw-shards";
constexpr const char* kWholeMoments = "optimizer.safetensors";  // version 1

std::string shard_file(int rank, int ranks) {
  return "optimizer-" + std::to_string(rank) + "-of-" + std::to_string(ranks) + ".safetensors";
}

void write_text_atomic(const std::string& path, const std::string& text) { write_text_file_atomic(path, text, kModule); }

std::string read_text(const std::string& path) {
  return read_text_file(path, kModule, "the checkpoint is incomplete; resume from another one");
}

nlohmann::json cursor_to_json(const data::DataLoaderState& s) {
  return {{"rng_state", {s.rng_state[0], s.rng_state[1], s.rng_state[2], s.rng_state[3]}},
          {"batches_served", s.batches_served},
          {"next_window", s.next_window},
          {"epoch", s.epoch},
          {"shard_tokens", s.shard_tokens},
          {"batch_size", s.batch_size},
          {"seq_tokens", s.seq_tokens},
          {"sampling", s.sampling}};
}

// Inside trainer_state.json, what is wrong throws fpdt::Error naming the file, std::invalid_argument
// or nlohmann's exceptions; parse_trainer_state turns the last two into one "<path> is corrupt: ..."
// error. Integers go through json::integer: nlohmann would cast a float or a negative number silently.
template <class T>
T whole_number(const nlohmann::ordered_json& value, const std::string& path, const char* key) {
  return json::integer<T>(value, path + " is corrupt: \"" + key + "\"", kModule);
}

data::DataLoaderState cursor_from_json(const nlohmann::ordered_json& json, const std::string& path) {
  data::DataLoaderState s{};
  const nlohmann::ordered_json& rng = json.at("rng_state");
  if (!rng.is_array() || rng.size() != 4) throw std::invalid_argument("\"rng_state\" must have 4 words");
  for (size_t i = 0; i < 4; ++i) s.rng_state[i] = whole_number<uint64_t>(rng[i], path, "rng_state");
  s.batches_served = whole_number<uint64_t>(json.at("batches_served"), path, "batches_served");
  s.next_window = whole_number<uint64_t>(json.at("next_window"), path, "next_window");
  s.epoch = whole_number<uint64_t>(json.at("epoch"), path, "epoch");
  s.shard_tokens = whole_number<uint64_t>(json.at("shard_tokens"), path, "shard_tokens");
  s.batch_size = whole_number<int64_t>(json.at("batch_size"), path, "batch_size");
  s.seq_tokens = whole_number<int64_t>(json.at("seq_tokens"), path, "seq_tokens");
  s.sampling = whole_number<uint32_t>(json.at("sampling"), path, "sampling");
  return s;
}

// trainer_state.json is small: a file past 1 MiB is refused before it is read.
constexpr size_t kMaxStateBytes = 1 << 20;


// What an update would turn into NaN: a weight or moment that is not finite, or a negative second
// moment (its square root). `what` names the checkpoint or step for the message. Collective.
void check_finite_state(pipeline::ModelStates& states, const std::string& what, const std::string& hint) {
  if (!states.weights_finite()) throw Error(kModule, what + " holds non-finite weights (NaN or Inf)", hint);
  if (!states.moments_valid())
    throw Error(kModule, what + " holds AdamW moments that are not finite (or negative second moments)", hint);
}

// The optimizer's update count from optimizer.safetensors' metadata: a whole number ≥ 0.
int64_t optimizer_step(const SafetensorsReader& moments, const std::string& path) {
  const std::string text = moments.metadata("step");
  int64_t step = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), step);
  if (error != std::errc() || end != text.data() + text.size() || step < 0)
    throw Error(kModule, path + " is corrupt: its AdamW step '" + text.substr(0, 40) + "' is not a count of updates",
                "resume from another checkpoint");
  return step;
}

// The model as a checkpoint's config.json states it: the generation token ids the config leaves unset
// are the tokenizer's, or null where it has none; never an id outside the vocabulary.
model::ModelConfig with_tokenizer_ids(model::ModelConfig config, const data::Tokenizer& tokenizer) {
  auto fill = [&](std::optional<model::TokenIds>& field, int32_t id) {
    if (field) return;
    field.emplace();
    if (id >= 0 && id < config.vocab_size) field->ids.push_back(id);
  };
  fill(config.bos_token_id, tokenizer.begin_of_text_id());
  fill(config.eos_token_id, tokenizer.end_of_document_id());
  fill(config.pad_token_id, tokenizer.padding_id());
  return config;
}

}  // namespace

void write_hf_model_files(const std::string& dir, const model::ModelConfig& config, const model::ParameterLayout& layout,
                          const model::ParameterBlock& weights, const data::Tokenizer* tokenizer,
                          const std::string& generation_config) {
  save_hf_safetensors(config, layout, weights, (fs::path(dir) / "model.safetensors").string());
  write_text_atomic((fs::path(dir) / "config.json").string(),
                    model::to_hf_config_json(tokenizer ? with_tokenizer_ids(config, *tokenizer) : config));
  if (!generation_config.empty())
    write_text_atomic((fs::path(dir) / model::kGenerationConfigFile).string(), generation_config);
  if (tokenizer) tokenizer->save(dir);
}

void save_checkpoint(const std::string& run_dir, const CheckpointSource& source, const TrainerState& state,
                     comm::Communicator& world, int keep, const std::function<void()>& shard_written) {
  auto& [config, states, optimizer, tokenizer, generation_config] = source;
  const std::string name = "step_" + std::to_string(state.step);
  // Never a checkpoint of a broken run: the older checkpoints stay the newest ones.
  check_finite_state(states, "refusing to save " + name + ": the model",
                     "a step made the weights non-finite; the checkpoints already in " + run_dir + " are intact");
  const fs::path final_dir = fs::path(run_dir) / name;
  const fs::path temp_dir = fs::path(run_dir) / (name + ".partial");
  const model::ParameterLayout& layout = states.layout();
  // The consolidated weights in host memory: every rank takes part in assembling them when they are
  // sharded; below stage 3 rank 0 downloads its whole copy.
  std::optional<model::ParameterBlock> gathered;
  if (states.run().zero >= 3 || world.rank() == 0) {
    gathered.emplace(layout, "checkpoint weights (gathered from the compute tier)", Tier::offload);
    states.gather_weights(*gathered);
  }
  if (world.rank() == 0) {
    std::error_code error;
    fs::create_directories(run_dir, error);
    if (error)
      throw Error(kModule, "cannot create the run directory " + run_dir + ": " + error.message(),
                  "choose another --out directory or check its permissions");
    fs::remove_all(temp_dir, error);  // debris of an earlier killed save
    if (!fs::create_directory(temp_dir, error) || error)
      throw Error(kModule, "cannot create " + temp_dir.string() + ": " + (error ? error.message() : "it exists"),
                  "check the run directory's permissions and free space");
  }
  world.barrier();

  // Each rank of the partition: its share of the moments, unit by unit.
  if (world.rank() < states.partition_ranks()) {
    const size_t units = layout.units().size();
    std::vector<std::vector<float>> moments(2 * units);
    SafetensorsWriter shards;
    for (size_t u = 0; u < units; ++u) {
      const int64_t count = states.own(static_cast<int>(u)).size();
      std::vector<float>& m = moments[2 * u];
      std::vector<float>& v = moments[2 * u + 1];
      m.resize(static_cast<size_t>(count));
      v.resize(static_cast<size_t>(count));
      states.read_moments(static_cast<int>(u), m.data(), v.data());
      shards.add("m." + std::to_string(u), Tensor(m.data(), DType::f32, {count}));
      shards.add("v." + std::to_string(u), Tensor(v.data(), DType::f32, {count}));
    }
    shards.set_metadata("format", kShardFormat);
    shards.set_metadata("version", "1");
    shards.set_metadata("step", std::to_string(optimizer.step()));
    shards.set_metadata("ranks", std::to_string(states.partition_ranks()));
    shards.set_metadata("rank", std::to_string(states.partition_rank()));
    shards.write((temp_dir / shard_file(states.partition_rank(), states.partition_ranks())).string());
  }
  if (shard_written) shard_written();
  world.barrier();

  if (world.rank() == 0) {
    write_hf_model_files(temp_dir.string(), config, layout, *gathered, &tokenizer, generation_config);
    const nlohmann::ordered_json trainer_state = {
        {"format", kStateFormat},
        {"version", kStateVersion},
        {"step", state.step},
        {"seed", state.seed},
        {"data_cursor", cursor_to_json(state.data)},
        {"tokenizer_fingerprint", data::fingerprint_string(tokenizer.fingerprint())},
        {"optimizer", {{"zero_stage", states.run().zero}, {"ranks", states.partition_ranks()}}},
        {"settings", state.settings.is_null() ? nlohmann::ordered_json::object() : state.settings}};
    write_text_atomic((temp_dir / "trainer_state.json").string(), trainer_state.dump(2) + "\n");

    // Before the first checkpoint's folder takes its name, `latest` says there is none yet: a kill
    // between the rename and the pointer then leaves a run that resumes from that folder (run_folder.h).
    const std::string pointer = (fs::path(run_dir) / "latest").string();
    if (!fs::exists(pointer)) write_text_atomic(pointer, std::string(kNoCheckpointYet) + "\n");
    std::error_code error;
    fs::remove_all(final_dir, error);
    fs::rename(temp_dir, final_dir, error);
    if (error)
      throw Error(kModule, "cannot rename " + temp_dir.string() + " to " + final_dir.string() + ": " + error.message());
    write_text_atomic(pointer, name + "\n");

    // Keep the newest `keep` step folders.
    std::vector<std::pair<int64_t, fs::path>> steps;
    for (const auto& entry : fs::directory_iterator(run_dir, error)) {
      const std::string folder = entry.path().filename().string();
      if (!entry.is_directory() || !folder.starts_with("step_") || folder.ends_with(".partial")) continue;
      try {
        steps.emplace_back(std::stoll(folder.substr(5)), entry.path());
      } catch (const std::exception&) {
      }
    }
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i)
      if (steps[i].first != state.step) fs::remove_all(steps[i].second, error);
  }
  world.barrier();
}

void load_weights(const std::string& checkpoint_dir, const model::ModelConfig& config, pipeline::ModelStates& states) {
  {
    model::ParameterBlock weights(states.layout(), "checkpoint weights (read before upload)", Tier::offload);
    model::HfCheckpoint(checkpoint_dir).load(config, states.layout(), weights);
    states.load_weights(weights);
  }
  MemoryTiers::instance().reset_peak(Tier::offload);
}

std::vector<std::string> optimizer_files(const std::string& checkpoint_dir) {
  const fs::path dir(checkpoint_dir);
  if (fs::exists(dir / kWholeMoments)) return {(dir / kWholeMoments).string()};
  std::vector<std::pair<int, std::string>> files;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    int rank = -1, ranks = -1;
    char tail = 0;
    const std::string file = entry.path().filename().string();
    if (std::sscanf(file.c_str(), "optimizer-%d-of-%d.safetensor%c", &rank, &ranks, &tail) == 3 && tail == 's' &&
        file == shard_file(rank, ranks))
      files.emplace_back(rank, entry.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> paths;
  for (const auto& [rank, path] : files) paths.push_back(path);
  return paths;
}

std::string latest_checkpoint(const std::string& run_dir) {
  const fs::path pointer = fs::path(run_dir) / "latest";
  if (!fs::exists(pointer)) return "";
  std::string name = read_text(pointer.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name == kNoCheckpointYet) return "";
  const fs::path folder = fs::path(run_dir) / name;
  if (name.empty() || !fs::is_directory(folder))
    throw Error(kModule, pointer.string() + " names '" + name + "', which is not a checkpoint folder",
                "the run directory was edited by hand; point 'latest' at an existing step_<N> folder");
  return folder.string();
}

std::string checkpoint_folder(const std::string& path) {
  if (fs::exists(fs::path(path) / "latest")) {
    const std::string folder = latest_checkpoint(path);
    if (folder.empty())
      throw Error(kModule, path + " is a run folder with no checkpoint yet",
                  "wait for its first save (--save-every), or pass a step_<N> folder");
    return folder;
  }
  if (fs::exists(fs::path(path) / "config.json")) return path;
  throw Error(kModule, path + " is neither a run folder (with 'latest') nor a checkpoint folder (with config.json)",
              "pass the --out folder of a training run or one of its step_<N> folders");
}

TrainerState parse_trainer_state(const std::string& text, const std::string& state_path) {
  const nlohmann::ordered_json json =
      json::parse<nlohmann::ordered_json>(text, state_path, kModule, "resume from another checkpoint");
  TrainerState state;
  try {
    if (!json.is_object() || !json.contains("format") || json.at("format") != kStateFormat)
      throw Error(kModule, state_path + " is not an fpdt trainer state (no \"format\": \"" + kStateFormat + "\")");
    const int version = whole_number<int>(json.at("version"), state_path, "version");
    if (version != kStateVersion && version != 1)
      throw Error(kModule, state_path + " has version " + std::to_string(version) + "; this build reads versions 1 and " +
                               std::to_string(kStateVersion));
    state.step = whole_number<int64_t>(json.at("step"), state_path, "step");
    if (state.step < 0) throw std::invalid_argument("\"step\" is negative");
    state.seed = whole_number<uint64_t>(json.at("seed"), state_path, "seed");
    state.data = cursor_from_json(json.at("data_cursor"), state_path);
    state.settings = json.at("settings");
    if (version >= 2) {
      state.optimizer_ranks = whole_number<int>(json.at("optimizer").at("ranks"), state_path, "ranks");
      if (state.optimizer_ranks < 1) throw std::invalid_argument("\"ranks\" of the optimizer is not a count of ranks");
    }
  } catch (const Error&) {
    throw;  // names the file already
  } catch (const std::exception& error) {
    // Every message here is ours or nlohmann's "key not found" / type error: short.
    throw Error(kModule, state_path + " is corrupt: " + error.what(), "resume from another checkpoint");
  }
  return state;
}

TrainerState read_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "trainer_state.json").string();
  if (file_size(path, kModule) > kMaxStateBytes)
    throw Error(kModule, path + " is larger than a trainer state can be (1 MiB)", "resume from another checkpoint");
  return parse_trainer_state(read_text(path), path);
}

void check_checkpoint_model(const std::string& checkpoint_dir, const model::ModelConfig& config) {
  const model::ModelConfig saved = model::load_hf_config((fs::path(checkpoint_dir) / "config.json").string());
  if (const std::optional<model::ConfigDifference> difference = model::config_difference(saved, config))
    throw Error(kModule,
                checkpoint_dir + " holds a model of another configuration: its config.json has " + difference->field +
                    " = " + difference->saved + ", this run's model " + difference->given,
                "leave out --model, --rope-theta and --rope-scaling to continue with the checkpoint's model, "
                "or start a new run directory");
}

namespace {

// Fills this rank's share of the moments of every unit from the shards of a partition of `ranks`
// ranks (or, ranks = 0, from a version 1 optimizer.safetensors of whole moments); returns the
// optimizer's step count the files record.
int64_t load_moments(const fs::path& dir, int ranks, pipeline::ModelStates& states) {
  const model::ParameterLayout& layout = states.layout();
  std::vector<std::unique_ptr<SafetensorsReader>> readers(static_cast<size_t>(std::max(ranks, 1)));
  auto reader = [&](int rank) -> SafetensorsReader& {
    std::unique_ptr<SafetensorsReader>& open = readers[static_cast<size_t>(rank)];
    if (open) return *open;
    const std::string path = (dir / (ranks == 0 ? std::string(kWholeMoments) : shard_file(rank, ranks))).string();
    open = std::make_unique<SafetensorsReader>(path);
    if (ranks > 0 && (open->metadata("format") != kShardFormat || open->metadata("ranks") != std::to_string(ranks) ||
                      open->metadata("rank") != std::to_string(rank)))
      throw Error(kModule, path + " is not rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                               "'s optimizer shard",
                  "the step folder was assembled from different checkpoints; resume from another one");
    return *open;
  };
  std::vector<float> m, v;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const model::ParameterUnit& unit = layout.units()[u];
    const pipeline::ShardRange own = states.own(static_cast<int>(u));
    m.assign(static_cast<size_t>(own.size()), 0.0f);
    v.assign(static_cast<size_t>(own.size()), 0.0f);
    if (ranks == 0) {  // whole moments by tensor name: the pieces of the tensors in this rank's share
      for (const model::ParameterInfo& info : layout.tensors()) {
        const int64_t begin = std::max(info.offset, unit.begin + own.begin);
        const int64_t end = std::min(info.offset + info.numel(), unit.begin + own.end);
        if (begin >= end) continue;
        const size_t at = static_cast<size_t>(begin - unit.begin - own.begin);
        reader(0).read_range("m." + info.name, begin - info.offset, end - begin, m.data() + at);
        reader(0).read_range("v." + info.name, begin - info.offset, end - begin, v.data() + at);
      }
    } else {  // the saved shares that overlap this rank's
      for (int rank = 0; rank < ranks; ++rank) {
        const pipeline::ShardRange saved = pipeline::shard_range(unit.numel(), ranks, rank);
        const int64_t begin = std::max(own.begin, saved.begin), end = std::min(own.end, saved.end);
        if (begin >= end) continue;
        SafetensorsReader& shard = reader(rank);
        for (const char* moment : {"m.", "v."}) {
          const std::string tensor = moment + std::to_string(u);
          if (shape_numel(shard.entry(tensor).shape) != saved.size())
            throw Error(kModule, shard.path() + ": tensor '" + tensor + "' holds " +
                                     std::to_string(shape_numel(shard.entry(tensor).shape)) + " values, not the " +
                                     std::to_string(saved.size()) + " of rank " + std::to_string(rank) + "'s share",
                        "the checkpoint belongs to a model with another configuration");
          shard.read_range(tensor, begin - saved.begin, end - begin,
                           (moment[0] == 'm' ? m.data() : v.data()) + (begin - own.begin));
        }
      }
    }
    states.write_moments(static_cast<int>(u), m.data(), v.data());
  }
  return optimizer_step(reader(0), reader(0).path());
}

}  // namespace

int64_t load_optimizer_state(const std::string& checkpoint_dir, pipeline::ModelStates& states, AdamW& optimizer) {
  const fs::path dir(checkpoint_dir);
  const TrainerState state = read_trainer_state(checkpoint_dir);
  const int shard_ranks = state.optimizer_ranks;
  const int64_t updates = load_moments(dir, shard_ranks, states);
  if (updates > state.step)
    throw Error(kModule, (dir / (shard_ranks == 0 ? std::string(kWholeMoments) : shard_file(0, shard_ranks))).string() +
                             " counts " + std::to_string(updates) + " AdamW updates, more than the " +
                             std::to_string(state.step) + " steps of " + (dir / "trainer_state.json").string(),
                "the files come from different checkpoints; resume from another one");
  optimizer.set_step(updates);
  return updates;
}

TrainerState load_checkpoint(const std::string& checkpoint_dir, const model::ModelConfig& config,
                             pipeline::ModelStates& states, AdamW& optimizer) {
  const fs::path dir(checkpoint_dir);
  if (!fs::is_directory(dir)) throw Error(kModule, "no checkpoint folder " + checkpoint_dir);
  check_checkpoint_model(checkpoint_dir, config);
  const TrainerState state = read_trainer_state(checkpoint_dir);
  {
    model::ParameterBlock whole(states.layout(), "checkpoint weights (read before sharding)", Tier::offload);
    load_hf_safetensors(config, states.layout(), whole, (dir / "model.safetensors").string());
    states.load_weights(whole);
  }
  load_optimizer_state(checkpoint_dir, states, optimizer);
  check_finite_state(states, checkpoint_dir,
                     "resume from an earlier checkpoint (write its folder name into " +
                         (dir.parent_path() / "latest").string() + ")");
  return state;
}

data::Tokenizer checkpoint_tokenizer(const std::string& checkpoint_dir, int32_t model_vocab_size) {
  const fs::path dir(checkpoint_dir);
  if (!fs::exists(dir / data::kTokenizerFile)) {
    if (model_vocab_size == data::Tokenizer::bytes().vocab_size()) return data::Tokenizer::bytes();
    throw Error(kModule, checkpoint_dir + " carries no " + data::kTokenizerFile + " and its model's vocabulary (" +
                             std::to_string(model_vocab_size) + ") is not the byte tokenizer's",
                "copy the tokenizer.json (and tokenizer_config.json) that its training shards were made with into it");
  }
  data::Tokenizer tokenizer = data::Tokenizer::load(checkpoint_dir);
  const fs::path state_path = dir / "trainer_state.json";
  if (fs::exists(state_path)) {
    uint64_t recorded = 0;
    const nlohmann::json state =
        json::parse(read_text(state_path.string()), state_path.string(), kModule, "use another checkpoint");
    if (state.is_object() && state.contains("tokenizer_fingerprint")) {
      // fingerprint_string's form, "0x" and hexadecimal digits, read whole.
      const nlohmann::json& value = state["tokenizer_fingerprint"];
      const std::string text = value.is_string() ? value.get<std::string>() : "";
      const char* digits = text.data() + (text.starts_with("0x") ? 2 : 0);
      const auto [end, error] = std::from_chars(digits, text.data() + text.size(), recorded, 16);
      if (text.empty() || error != std::errc() || end != text.data() + text.size())
        throw Error(kModule,
                    state_path.string() + " is corrupt: its \"tokenizer_fingerprint\" " + json::excerpt(value) +
                        " is not a hexadecimal fingerprint",
                    "use another checkpoint");
    }
    if (recorded != 0 && recorded != tokenizer.fingerprint())
      throw Error(kModule,
                  (dir / data::kTokenizerFile).string() + " is another tokenizer (" +
                      data::fingerprint_string(tokenizer.fingerprint()) +
                      ") than the one the model was trained with (" + data::fingerprint_string(recorded) + ")",
                  "put back the tokenizer.json the run's shards were made with (fpdt inspect on a shard shows its fingerprint)");
  }
  if (tokenizer.vocab_size() > model_vocab_size)
    throw Error(kModule,
                (dir / data::kTokenizerFile).string() + " has ids up to " + std::to_string(tokenizer.vocab_size() - 1) +
                    ", beyond the model's vocabulary of " + std::to_string(model_vocab_size),
                "the tokenizer does not belong to this model");
  return tokenizer;
}

}  // namespace fpdt::train

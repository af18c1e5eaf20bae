// Checkpoint save and load (see checkpoint.h).
#include "fpdt/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/json.h"
#include "fpdt/tensor/safetensors.h"

namespace fpdt::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModule = "checkpoint";
constexpr const char* kStateFormat = "fpdt-trainer-state";
constexpr int kStateVersion = 1;

void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, [&](int fd) { write_fully(fd, text.data(), text.size(), path, kModule); }, kModule);
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw Error(kModule, "cannot open " + path, "the checkpoint is incomplete; resume from another one");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

nlohmann::json cursor_to_json(const DataLoaderState& s) {
  return {{"rng_state", {s.rng_state[0], s.rng_state[1], s.rng_state[2], s.rng_state[3]}},
          {"batches_served", s.batches_served},
          {"next_window", s.next_window},
          {"epoch", s.epoch},
          {"shard_tokens", s.shard_tokens},
          {"batch_size", s.batch_size},
          {"seq_tokens", s.seq_tokens},
          {"sampling", s.sampling}};
}

// `where` names the file in errors.
DataLoaderState cursor_from_json(const nlohmann::json& json, const std::string& where) {
  auto integer = [&]<typename T>(const char* key, T) {
    return json::integer<T>(json.at(key), where + ": data_cursor." + key, kModule);
  };
  DataLoaderState s{};
  const nlohmann::json& rng = json.at("rng_state");
  if (!rng.is_array() || rng.size() != 4) throw Error(kModule, where + ": rng_state must have 4 words");
  for (size_t i = 0; i < 4; ++i) s.rng_state[i] = json::integer<uint64_t>(rng[i], where + ": rng_state", kModule);
  s.batches_served = integer("batches_served", uint64_t{});
  s.next_window = integer("next_window", uint64_t{});
  s.epoch = integer("epoch", uint64_t{});
  s.shard_tokens = integer("shard_tokens", uint64_t{});
  s.batch_size = integer("batch_size", int64_t{});
  s.seq_tokens = integer("seq_tokens", int64_t{});
  s.sampling = integer("sampling", uint32_t{});
  return s;
}

}  // namespace

void save_checkpoint(const std::string& run_dir, const model::ModelConfig& config,
                     const model::ParameterLayout& layout, const model::ParameterBlock& params, AdamW& optimizer,
                     const TrainerState& state, int keep) {
  const std::string name = "step_" + std::to_string(state.step);
  const fs::path final_dir = fs::path(run_dir) / name;
  const fs::path temp_dir = fs::path(run_dir) / (name + ".partial");
  std::error_code error;
  fs::create_directories(run_dir, error);
  if (error)
    throw Error(kModule, "cannot create the run directory " + run_dir + ": " + error.message(),
                "choose another --out directory or check its permissions");
  fs::remove_all(temp_dir, error);  // debris of an earlier killed save
  if (!fs::create_directory(temp_dir, error) || error)
    throw Error(kModule, "cannot create " + temp_dir.string() + ": " + (error ? error.message() : "it exists"),
                "check the run directory's permissions and free space");

  save_hf_safetensors(config, layout, params, (temp_dir / "model.safetensors").string());
  write_text_atomic((temp_dir / "config.json").string(), model::to_hf_config_json(config));
  SafetensorsWriter moments;
  for (const model::ParameterInfo& info : layout.tensors()) {
    moments.add("m." + info.name, optimizer.m().view(info.name));
    moments.add("v." + info.name, optimizer.v().view(info.name));
  }
  moments.set_metadata("format", "fpdt-adamw");
  moments.set_metadata("version", "1");
  moments.set_metadata("step", std::to_string(optimizer.step()));
  moments.write((temp_dir / "optimizer.safetensors").string());
  const nlohmann::ordered_json trainer_state = {
      {"format", kStateFormat},
      {"version", kStateVersion},
      {"step", state.step},
      {"seed", state.seed},
      {"data_cursor", cursor_to_json(state.data)},
      {"settings", state.settings_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(state.settings_json)}};
  write_text_atomic((temp_dir / "trainer_state.json").string(), trainer_state.dump(2) + "\n");

  fs::remove_all(final_dir, error);
  fs::rename(temp_dir, final_dir, error);
  if (error) throw Error(kModule, "cannot rename " + temp_dir.string() + " to " + final_dir.string() + ": " + error.message());
  write_text_atomic((fs::path(run_dir) / "latest").string(), name + "\n");

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

std::string latest_checkpoint(const std::string& run_dir) {
  const fs::path pointer = fs::path(run_dir) / "latest";
  if (!fs::exists(pointer)) return "";
  std::string name = read_text(pointer.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path folder = fs::path(run_dir) / name;
  if (name.empty() || !fs::is_directory(folder))
    throw Error(kModule, pointer.string() + " names '" + name + "', which is not a checkpoint folder",
                "the run directory was edited by hand; point 'latest' at an existing step_<N> folder");
  return folder.string();
}

TrainerState parse_trainer_state(const std::string& text, const std::string& state_path) {
  TrainerState state;
  try {
    const nlohmann::json json = json::parse(text, state_path, kModule, "resume from another checkpoint");
    if (json.at("format").get<std::string>() != kStateFormat)
      throw Error(kModule, state_path + " is not an fpdt trainer state (format '" +
                               json::excerpt_text(json.at("format").get<std::string>()) + "')");
    const int version = json::integer<int>(json.at("version"), state_path + ": version", kModule);
    if (version != kStateVersion)
      throw Error(kModule, state_path + " has version " + std::to_string(version) + "; this build reads version " +
                               std::to_string(kStateVersion));
    state.step = json::integer<int64_t>(json.at("step"), state_path + ": step", kModule);
    state.seed = json::integer<uint64_t>(json.at("seed"), state_path + ": seed", kModule);
    state.data = cursor_from_json(json.at("data_cursor"), state_path);
    state.settings_json = json.at("settings").dump();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw Error(kModule, state_path + " is corrupt: " + error.what(), "resume from another checkpoint");
  }
  return state;
}

TrainerState load_checkpoint(const std::string& checkpoint_dir, const model::ModelConfig& config,
                             const model::ParameterLayout& layout, model::ParameterBlock& params, AdamW& optimizer) {
  const fs::path dir(checkpoint_dir);
  if (!fs::is_directory(dir)) throw Error(kModule, "no checkpoint folder " + checkpoint_dir);
  const model::ModelConfig saved = model::load_hf_config((dir / "config.json").string());
  if (model::to_hf_config_json(saved) != model::to_hf_config_json(config))
    throw Error(kModule, checkpoint_dir + " holds a model of another configuration",
                "resume with the same --model, or start a new run directory");

  const TrainerState state = parse_trainer_state(read_text((dir / "trainer_state.json").string()),
                                                (dir / "trainer_state.json").string());
  load_hf_safetensors(config, layout, params, (dir / "model.safetensors").string());
  SafetensorsReader moments((dir / "optimizer.safetensors").string());
  for (const model::ParameterInfo& info : layout.tensors()) {
    moments.read("m." + info.name, optimizer.m().view(info.name));
    moments.read("v." + info.name, optimizer.v().view(info.name));
  }
  optimizer.set_step(std::stoll(moments.metadata("step")));
  return state;
}

}  // namespace fpdt::train

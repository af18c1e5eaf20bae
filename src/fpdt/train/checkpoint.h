// Checkpoints: a folder per saved step that Hugging Face tools load as it is (model.safetensors with
// HF tensor names + config.json), with the optimizer's moments and the trainer's state beside it:
//   <run>/step_<N>/model.safetensors      weights, HF names
//   <run>/step_<N>/config.json            HF config
//   <run>/step_<N>/optimizer.safetensors  AdamW m and v (internal names "m.<name>", "v.<name>")
//   <run>/step_<N>/trainer_state.json     format/version, step, data cursor, seed, run settings
//   <run>/latest                          "step_<N>", replaced atomically after a complete save
// A step folder is written under a temporary name and renamed when complete; `latest` moves only
// then, so a failed or killed save never damages the checkpoint before it.
#pragma once

#include <cstdint>
#include <string>

#include "fpdt/model/config.h"
#include "fpdt/model/parameters.h"
#include "fpdt/train/data_loader.h"
#include "fpdt/train/optimizer.h"

namespace fpdt::train {

struct TrainerState {
  int64_t step = 0;            // optimizer steps completed
  DataLoaderState data{};      // the training loader's cursor
  uint64_t seed = 0;
  std::string settings_json;   // the run's effective settings, for `fpdt inspect` and resume checks
};

// Saves a checkpoint of step state.step and points <run_dir>/latest at it; keeps the newest `keep`
// step folders and removes older ones. Throws fpdt::Error naming the path on any failure.
void save_checkpoint(const std::string& run_dir, const model::ModelConfig& config,
                     const model::ParameterLayout& layout, const model::ParameterBlock& params, AdamW& optimizer,
                     const TrainerState& state, int keep = 2);

// The folder <run_dir>/latest points at, or "" when the run has no checkpoint yet.
std::string latest_checkpoint(const std::string& run_dir);

// Parses and checks trainer_state.json text (read from state_path, named in errors).
TrainerState parse_trainer_state(const std::string& text, const std::string& state_path);

// Restores params, optimizer moments and step from a step folder; returns the trainer state. Checks
// that the checkpoint's config.json describes `config`; throws fpdt::Error for a missing, truncated
// or corrupt file, naming it.
TrainerState load_checkpoint(const std::string& checkpoint_dir, const model::ModelConfig& config,
                             const model::ParameterLayout& layout, model::ParameterBlock& params, AdamW& optimizer);

}  // namespace fpdt::train

// Checkpoints: a folder per saved step that Hugging Face tools load as it is (model.safetensors with
// HF tensor names + config.json), with the optimizer's moments and the trainer's state beside it:
//   <run>/step_<N>/model.safetensors      weights, HF names
//   <run>/step_<N>/config.json            HF config
//   <run>/step_<N>/optimizer.safetensors  AdamW m and v (internal names "m.<name>", "v.<name>")
//   <run>/step_<N>/trainer_state.json     format/version, step, data cursor, seed, run settings,
//                                         the tokenizer's fingerprint
//   <run>/step_<N>/tokenizer.json         the tokenizer the shards were made with (byte runs too),
//   <run>/step_<N>/tokenizer_config.json  so transformers' AutoTokenizer.from_pretrained(step) works
//   <run>/latest                          "step_<N>", replaced atomically after a complete save
// A step folder is written under a temporary name and renamed when complete; `latest` moves only
// then, so a failed or killed save never damages the checkpoint before it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fpdt/model/config.h"
#include "fpdt/model/parameters.h"
#include "fpdt/train/data_loader.h"
#include "fpdt/train/optimizer.h"
#include "fpdt/train/tokenizer.h"

namespace fpdt::train {

struct TrainerState {
  int64_t step = 0;            // optimizer steps completed
  DataLoaderState data{};      // the training loader's cursor
  uint64_t seed = 0;
  nlohmann::ordered_json settings;  // the run's effective settings ({"option": value}), for `fpdt inspect`
};

// Saves a checkpoint of step state.step and points <run_dir>/latest at it; keeps the newest `keep`
// step folders and removes older ones. Refuses (fpdt::Error, nothing written or removed) weights or
// moments that are not finite, so every checkpoint in a run folder is one a run can continue from and
// the rotation never deletes the last finite one. Throws fpdt::Error naming the path on any failure.
// The tokenizer's files are written beside the weights, its fingerprint into trainer_state.json.
void save_checkpoint(const std::string& run_dir, const model::ModelConfig& config,
                     const model::ParameterLayout& layout, const model::ParameterBlock& params, AdamW& optimizer,
                     const TrainerState& state, const Tokenizer& tokenizer, int keep = 2);

// The folder <run_dir>/latest points at, or "" when the run has no checkpoint yet.
std::string latest_checkpoint(const std::string& run_dir);

// Parses and checks trainer_state.json text (read from state_path, named in errors).
TrainerState parse_trainer_state(const std::string& text, const std::string& state_path);

// Restores params, optimizer moments and step from a step folder; returns the trainer state. Checks
// that the checkpoint's config.json describes `config`; throws fpdt::Error for a missing, truncated
// or corrupt file, naming it (a trainer state that is not a small shallow JSON object of whole numbers,
// an AdamW step count that is not one, non-finite weights or moments).
TrainerState load_checkpoint(const std::string& checkpoint_dir, const model::ModelConfig& config,
                             const model::ParameterLayout& layout, model::ParameterBlock& params, AdamW& optimizer);

// The tokenizer a step folder was trained with: its tokenizer.json (which must be the one its
// trainer_state.json records), or the byte tokenizer for checkpoints from before tokenizer files when
// the model's vocabulary is the byte tokenizer's 257. Throws fpdt::Error when the folder has no
// tokenizer, another one than it was trained with, or one whose ids do not fit `model_vocab_size`.
Tokenizer checkpoint_tokenizer(const std::string& checkpoint_dir, int32_t model_vocab_size);

}  // namespace fpdt::train

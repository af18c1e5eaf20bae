// Checkpoints: a folder per saved step that Hugging Face tools load as it is (model.safetensors with
// HF tensor names + config.json), with the optimizer's moments and the trainer's state beside it:
//   <run>/step_<N>/model.safetensors      weights, HF names, consolidated (written by rank 0)
//   <run>/step_<N>/config.json            HF config; the generation token ids it leaves unset are the
//                                         tokenizer's (bos_token, end-of-document token, pad_token)
//   <run>/step_<N>/generation_config.json the --init-from folder's, as it was, when it has one
//   <run>/step_<N>/optimizer-<r>-of-<P>.safetensors
//                                         AdamW m and v: partition rank r's share of each parameter unit
//                                         (tensors "m.<unit>", "v.<unit>"; pipeline/memory_layout.h's
//                                         shard_range), written by that rank; P = W from ZeRO stage 1, 1
//                                         below. (Version 1 checkpoints hold optimizer.safetensors: whole
//                                         moments under internal names "m.<name>", "v.<name>".)
//   <run>/step_<N>/trainer_state.json     format/version, step, data cursor, seed, run settings,
//                                         the tokenizer's fingerprint, the optimizer's partition
//   <run>/step_<N>/tokenizer.json         the tokenizer the shards were made with (byte runs too),
//   <run>/step_<N>/tokenizer_config.json  so transformers' AutoTokenizer.from_pretrained(step) works
//   <run>/latest                          "step_<N>", replaced atomically after a complete save;
//                                         "none" (kNoCheckpointYet) while the first save renames its folder
// A step folder is written under a temporary name, by every rank of the partition, and renamed by
// rank 0 when complete; `latest` moves only then, so a failed or killed save (of any rank) never
// damages the checkpoint before it. A kill between the rename and the pointer leaves a complete step
// folder that `latest` does not name yet: the previous checkpoint, or "none" at the first save (then
// a resume takes the newest step folder: run_folder.h resume_checkpoint). A checkpoint resumes at any world size and ZeRO stage: each rank
// reads its share of the moments from the shards that hold it.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fpdt/comm/communicator.h"
#include "fpdt/data/data_loader.h"
#include "fpdt/data/tokenizer.h"
#include "fpdt/model/config.h"
#include "fpdt/pipeline/model_states.h"
#include "fpdt/train/optimizer.h"

namespace fpdt::train {

struct TrainerState {
  int64_t step = 0;            // optimizer steps completed
  data::DataLoaderState data{};  // the training loader's cursor
  uint64_t seed = 0;
  nlohmann::ordered_json settings;  // the run's effective settings ({"option": value}), for `fpdt inspect`
  int optimizer_ranks = 0;     // the partition the optimizer's shards were saved in (0: version 1, whole moments)
};

// The files of a Hugging Face model folder in `dir` (an existing folder): model.safetensors (F32, HF
// names), config.json (the generation token ids it leaves unset are the tokenizer's), generation_config.json
// when given (its text, "" for none), and the tokenizer's tokenizer.json and tokenizer_config.json when
// `tokenizer` is not null. Checkpoints hold these beside the optimizer's files; `fpdt convert` writes
// only these. Throws fpdt::Error naming the path on any failure.
void write_hf_model_files(const std::string& dir, const model::ModelConfig& config, const model::ParameterLayout& layout,
                          const model::ParameterBlock& weights, const data::Tokenizer* tokenizer,
                          const std::string& generation_config);

// What a checkpoint is written from, besides the trainer state: the model (its config, states and
// optimizer) and what travels with its weights — the tokenizer (its files beside the weights, its
// fingerprint in trainer_state.json) and generation_config.json's text ("" for none).
struct CheckpointSource {
  const model::ModelConfig& config;
  pipeline::ModelStates& states;
  AdamW& optimizer;
  const data::Tokenizer& tokenizer;
  const std::string& generation_config;
};

// The step folders a run keeps: the newest two, the latest and the one before it.
inline constexpr int kKeptCheckpoints = 2;

// Saves a checkpoint of step state.step and points <run_dir>/latest at it; keeps the newest `keep`
// step folders and removes older ones. Collective over `world` (the states' ranks). Refuses (fpdt::Error
// on every rank, nothing written or removed) weights or moments that are not finite, so every
// checkpoint in a run folder is one a run can continue from and the rotation never deletes the last
// finite one. Throws fpdt::Error naming the path on any failure.
// shard_written: a test hook each rank runs once its optimizer shard is written (before the checkpoint
// is complete).
void save_checkpoint(const std::string& run_dir, const CheckpointSource& source, const TrainerState& state,
                     comm::Communicator& world, int keep = kKeptCheckpoints,
                     const std::function<void()>& shard_written = {});

// What <run>/latest holds until the run's first checkpoint.
inline constexpr const char* kNoCheckpointYet = "none";

// The folder <run_dir>/latest points at, or "" when the run has no checkpoint yet (no `latest`, or
// kNoCheckpointYet).
std::string latest_checkpoint(const std::string& run_dir);
// A run folder (with `latest`) or a step or Hugging Face folder (with config.json) → the step folder;
// throws fpdt::Error for anything else.
std::string checkpoint_folder(const std::string& path);

// Parses and checks trainer_state.json text (read from state_path, named in errors).
TrainerState parse_trainer_state(const std::string& text, const std::string& state_path);

// trainer_state.json of a step folder, read and checked (parse_trainer_state; at most 1 MiB).
TrainerState read_trainer_state(const std::string& checkpoint_dir);

// Throws fpdt::Error unless the step folder's config.json describes `config`
// (model::config_difference; the error names the first field that differs and both values).
void check_checkpoint_model(const std::string& checkpoint_dir, const model::ModelConfig& config);

// Restores the weights, this rank's share of the moments (from the shards of whatever partition saved
// them) and the step count into `states` and `optimizer`; returns the trainer state. Collective over
// the states' ranks (they agree on the finite checks). Checks that the checkpoint's config.json
// describes `config` (check_checkpoint_model); throws
// fpdt::Error for a missing, truncated or corrupt file, naming it (a trainer state that is not a small
// shallow JSON object of whole numbers, an AdamW step count that is not one, shards of another model,
// non-finite weights or moments).
TrainerState load_checkpoint(const std::string& checkpoint_dir, const model::ModelConfig& config,
                             pipeline::ModelStates& states, AdamW& optimizer);

// This rank's share of the AdamW moments of a step folder (from the shards of whatever partition saved them)
// into `states`, and its update count into `optimizer`; returns that count. For a run that starts from
// another run's checkpoint with its optimizer state (--init-optimizer: a stage of a staged run), whose
// weights the caller loads. Collective like load_checkpoint; fpdt::Error naming a missing or foreign file.
int64_t load_optimizer_state(const std::string& checkpoint_dir, pipeline::ModelStates& states, AdamW& optimizer);

// The weights of a step or Hugging Face folder into `states` (read into host memory first: the compute tier
// may be a GPU's), for forward passes (eval, sample); the offload tier's peak is reset after the reading's
// host blocks, so it reports what the passes use.
void load_weights(const std::string& checkpoint_dir, const model::ModelConfig& config, pipeline::ModelStates& states);

// The optimizer files of a step folder, in partition-rank order (one for a version 1 checkpoint).
std::vector<std::string> optimizer_files(const std::string& checkpoint_dir);

// The tokenizer a step folder was trained with: its tokenizer.json (which must be the one its
// trainer_state.json records), or the byte tokenizer for checkpoints from before tokenizer files when
// the model's vocabulary is the byte tokenizer's 257. Throws fpdt::Error when the folder has no
// tokenizer, another one than it was trained with, or one whose ids do not fit `model_vocab_size`.
data::Tokenizer checkpoint_tokenizer(const std::string& checkpoint_dir, int32_t model_vocab_size);

}  // namespace fpdt::train

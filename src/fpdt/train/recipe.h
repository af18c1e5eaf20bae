// Recipes of `fpdt extend`: a context extension as stages, read from one YAML file (yaml-cpp) and resolved
// whole before anything runs — every stage's `fpdt train` settings complete (defaults filled in, RoPE and
// seed carried from stage to stage), its gates, its layout (`auto`: chosen by the planner within the
// recipe's budgets). The file:
//
//   model: ~/models/SmolLM2.gguf      # base model: Hugging Face folder or GGUF file
//   data: data/kjv-smollm2            # shards (train.bin, val.bin): validation, gates, tokenizer
//   out: runs/extend                  # the run folder (default: runs/<recipe name>)
//   base_seq: 8192                    # the base model's context (default: its config's)
//   mixture:                          # optional: training rows drawn from these sources (data/mixture.h)
//     - {data: data/long, weight: 0.6, min_doc_tokens: 8192}
//     - {data: data/short, weight: 0.4, max_doc_tokens: 2048}
//   budget: {compute: 8GiB, ram: 16GiB, disk: 0}   # what `layout: auto` may use per rank (0: unlimited)
//   train: {precision: bf16, lr: 2e-5}             # fpdt train options of every stage
//   gates:                                         # after every stage (a stage's own gates override)
//     position_loss: {sequences: 1, max_excess: 0.25, policy: warn, compare_base: false}
//     short_loss: {sequences: 2, max_regression: 0.1, policy: stop}
//     ruler: {tasks: niah_single_1, samples: 4, min_score: 50, policy: warn}
//   stages:
//     - name: 12k
//       seq: 12K
//       steps: 20
//       rope: {type: yarn, factor: 1.5}            # or {theta: 8e6}; omitted: the previous stage's
//       optimizer: carry                           # or fresh (default: carry; the first stage: fresh)
//       layout: auto                               # or given with train options (chunk-tokens, offload, ...)
//       batch_tokens: 24K                          # tokens per optimizer step: sets grad-accum
//       lr: 1e-5                                   # any other fpdt train option
//
// A stage's train options are `fpdt train`'s, spelled without "--" and checked by the same declarations;
// those the recipe owns (init-from, out, data, mixture, resume, dry-run, ...) are refused in it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fpdt/train/auto_layout.h"
#include "fpdt/train/settings.h"

namespace fpdt::train {

enum class GatePolicy { stop, warn };

// The loss by position of held-out sequences at the stage's S: the mean loss at positions at or beyond
// the base context (far) against the loss at positions [base/2, base) of the same sequences (near);
// the figure is far − near (nats), passing when at most max_excess. compare_base also evaluates the base
// model on the same sequences, as it is and with the stage's RoPE (no training): what the training bought.
struct PositionLossGate {
  bool on = false;
  int64_t sequences = 1;
  double max_excess = 0.25;
  bool compare_base = false;
  GatePolicy policy = GatePolicy::warn;
};
// The loss of held-out sequences of the base context against the base model's on the same sequences:
// the figure is stage − base (nats), passing when at most max_regression.
struct ShortLossGate {
  bool on = false;
  int64_t sequences = 2;
  double max_regression = 0.1;
  GatePolicy policy = GatePolicy::stop;
};
// RULER (fpdt eval --tasks) at the stage's S (or the lengths given): the figure is the average score over
// tasks and lengths, passing when at least min_score.
struct RulerGate {
  bool on = false;
  std::string tasks = "niah_single_1";
  int64_t samples = 4;
  std::string lengths;  // "": the stage's S
  std::string chat_template = "base";
  double min_score = 50.0;
  GatePolicy policy = GatePolicy::warn;
};
struct StageGates {
  PositionLossGate position_loss;
  ShortLossGate short_loss;
  RulerGate ruler;
};

struct RecipeStage {
  std::string name;
  int line = 0;                 // of the stage in the recipe, for messages
  TrainSettings train;          // complete: out, data, mixture, RoPE, seed, layout; init_from is set when it runs
  bool carry_optimizer = false; // start from the previous stage's AdamW moments and update count
  bool auto_layout = false;     // the layout was chosen by the planner (train.run holds the choice)
  StageGates gates;
};

struct Recipe {
  std::string path;
  std::string base_model;  // Hugging Face folder or GGUF file
  std::string data_dir;
  std::string out_dir;
  int64_t base_seq = 0;
  LayoutBudget budget;     // what `layout: auto` may use, per rank
  std::vector<RecipeStage> stages;
};

// Reads and resolves a recipe. Throws one fpdt::Error naming the file, the line and the field for a
// malformed file, a bad value, an unknown field (the known ones listed) or a stage `fpdt train` would
// refuse. The base model's config is read (its context, for base_seq and RoPE scaling).
Recipe load_recipe(const std::string& path);

// The folder of stage i (0-based) in the run folder: <out>/stage<i+1>-<name>.
std::string stage_dir(const Recipe& recipe, size_t stage);

// The resolved recipe: every stage's settings as fpdt train's options, its gates, optimizer and layout.
nlohmann::ordered_json resolved_json(const Recipe& recipe);

// Whether a run folder's resolved recipe `saved` can be continued by `current`: stages that have started
// (the first `started` ones) must be trained alike (their settings equal; their gates may change). Returns
// the differences of the stages not yet started, for the log; throws fpdt::Error naming every field that
// differs in a started stage.
std::vector<std::string> check_recipe_edit(const nlohmann::ordered_json& saved, const nlohmann::ordered_json& current,
                                           size_t started);

std::string gate_policy_spelling(GatePolicy policy);

}  // namespace fpdt::train

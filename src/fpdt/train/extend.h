// `fpdt extend RECIPE`: a context extension run as its recipe's stages (recipe.h), each one `fpdt train`
// from the previous stage's last checkpoint, with the gates after it; one run folder that survives
// anything:
//   <out>/recipe.resolved.json   the recipe with every default filled in (a resume compares against it)
//   <out>/base/                  the base model as a Hugging Face folder, when the recipe names a GGUF file
//   <out>/base_short_loss.json   the base model's loss at its context (the short-loss gate's reference)
//   <out>/stage<i>-<name>/       the stage's run folder (checkpoints, metrics.jsonl), and in it
//       gates.json               its gates' figures and verdicts, once they ran
//   <out>/report.json, summary.txt  every stage's training (its metrics log's losses and peaks, the mixture
//                                   it drew), gates and layout (rewritten after each stage)
// A resume continues where the run stopped — mid-stage bitwise (the trainer's resume), at a gate (gates
// are forward passes of the saved weights, so they give the same figures again) — and refuses a recipe
// edited in stages that have started. A failing gate of policy stop ends the run with its figures.
#pragma once

#include <string>

#include "fpdt/comm/communicator.h"

namespace fpdt::train {

struct ExtendSettings {
  std::string recipe;
  bool dry_run = false;    // check the recipe, lay out each stage, report memory; train nothing
  bool resume = false;     // continue the run in the recipe's out folder
  bool overwrite = false;  // start afresh in an out folder that holds a run (its stages are deleted)
};

// Exit status of a run a gate stopped.
inline constexpr int kGateStoppedExitStatus = 3;

// Runs the recipe on every rank of `world` (rank 0 writes the run folder's files). Returns the process's
// exit status: 0, kPreemptedExitStatus (a stage was preempted and saved) or kGateStoppedExitStatus.
// Throws fpdt::Error for a bad recipe, data or run folder.
int run_extend(const ExtendSettings& settings, comm::Communicator& world);

}  // namespace fpdt::train

// `layout: auto` of a recipe stage: the planner (plan/plan.h) evaluates the layouts a stage could run —
// chunk sizes S, S/2, S/4, … down to one 128-token tile per rank, the offload tier (none, RAM, disk) and
// recomputation (none, layer), its precision and ZeRO stage as given — and the fastest by its cost model
// whose compute and offload peaks fit the recipe's budgets and the machine is chosen. The cost model ties
// layouts whose copies compute hides; among equals the first considered is kept: the largest chunk, then the
// least offload (none, RAM, disk), then no recomputation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/model/config.h"
#include "fpdt/pipeline/run_spec.h"

namespace fpdt::train {

struct LayoutBudget {
  int64_t compute_bytes = 0;  // per rank, 0: the machine's memory
  int64_t ram_bytes = 0;      // RAM offload tier, 0: the machine's memory
  int64_t disk_bytes = 0;     // disk offload tier, 0: the planner's disk
};

struct LayoutCandidate {
  pipeline::RunSpec run;      // the stage's run with this layout
  double step_seconds = 0;    // the cost model's step time
  double compute_bytes = 0;   // the memory model's compute-tier peak (tensors)
  double offload_bytes = 0;   // and its offload tier's (0 without offload)
  bool within_budget = false;
  std::string refused;        // why it is not within the budget ("" when it is)
};

struct LayoutChoice {
  std::vector<LayoutCandidate> considered;
  size_t chosen = 0;  // index into considered
  const pipeline::RunSpec& run() const { return considered[chosen].run; }
};

// The layouts of `run` (its S, batch, sp, dp, precision, ZeRO) for `model`, and the fastest within the
// budget; the chosen run carries the budgets as its compute/offload limits, so the trainer enforces them.
// Throws fpdt::Error of `module` naming the budget when no layout fits, with the smallest peaks seen.
LayoutChoice choose_layout(const std::string& module, const model::ModelConfig& model, const pipeline::RunSpec& run,
                           const LayoutBudget& budget);

// "C 4096, offload ram, recompute layer" for a person.
std::string describe_layout(const pipeline::RunSpec& run);

}  // namespace fpdt::train

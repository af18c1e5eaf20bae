// The planner's choice of a stage's layout (see auto_layout.h).
#include "fpdt/train/auto_layout.h"

#include <algorithm>
#include <limits>

#include "fpdt/base/error.h"
#include "fpdt/base/machine.h"
#include "fpdt/plan/config.h"
#include "fpdt/plan/plan.h"

namespace fpdt::train {

namespace {

std::string bytes(double value) { return format_bytes(value); }

}  // namespace

std::string describe_layout(const pipeline::RunSpec& run) {
  return "C " + std::to_string(run.chunk_tokens) + ", offload " + pipeline::spelling(run.offload) + ", recompute " +
         pipeline::spelling(run.recompute);
}

LayoutChoice choose_layout(const std::string& module, const model::ModelConfig& model, const pipeline::RunSpec& run,
                           const LayoutBudget& budget) {
  plan::Hardware hardware = plan::hardware_preset("cpu");
  const double machine = static_cast<double>(machine_memory_bytes());
  if (machine > 0) hardware.compute_bytes = hardware.host_bytes = machine;
  LayoutChoice choice;
  const int64_t ranks = run.sp;
  const int64_t smallest = plan::kMinLocalChunkTokens * ranks;
  for (int64_t chunk = run.seq_tokens; ; chunk = (chunk + 1) / 2) {
    const int64_t rounded = (chunk + ranks - 1) / ranks * ranks;  // a multiple of P
    for (const pipeline::OffloadKind offload :
         {pipeline::OffloadKind::none, pipeline::OffloadKind::ram, pipeline::OffloadKind::disk}) {
      for (const pipeline::Recompute recompute : {pipeline::Recompute::none, pipeline::Recompute::layer}) {
        LayoutCandidate candidate;
        candidate.run = run;
        candidate.run.mode = pipeline::Mode::fpdt;
        candidate.run.chunk_tokens = rounded;
        candidate.run.chunks = 1;  // unused with a chunk size (the trainer's options keep it at least 1)
        candidate.run.offload = pipeline::OffloadConfig{offload, ""};
        candidate.run.recompute = recompute;
        candidate.run.compute_mem_bytes = budget.compute_bytes;
        candidate.run.offload_mem_bytes = offload == pipeline::OffloadKind::ram    ? budget.ram_bytes
                                          : offload == pipeline::OffloadKind::disk ? budget.disk_bytes
                                                                                   : 0;
        plan::PlanConfig config;
        config.model = model;
        config.run = candidate.run;
        plan::PlanResult result;
        try {
          result = plan::make_plan(config, hardware);
        } catch (const Error& impossible) {
          continue;  // not a layout of this run (e.g. a chunk the sequence cannot be cut into)
        }
        candidate.step_seconds = result.time.total_s;
        candidate.compute_bytes = result.compute_peak.bytes;
        candidate.offload_bytes = offload == pipeline::OffloadKind::none ? 0.0 : result.offload_peak.bytes;
        const double offload_budget = static_cast<double>(candidate.run.offload_mem_bytes);
        if (budget.compute_bytes > 0 && candidate.compute_bytes > static_cast<double>(budget.compute_bytes))
          candidate.refused = "compute " + bytes(candidate.compute_bytes) + " > budget " + bytes(budget.compute_bytes);
        else if (offload_budget > 0 && candidate.offload_bytes > offload_budget)
          candidate.refused = pipeline::spelling(offload) + " " + bytes(candidate.offload_bytes) + " > budget " +
                              bytes(offload_budget);
        else if (!result.fits)
          candidate.refused = "the machine's " + result.bound;
        candidate.within_budget = candidate.refused.empty();
        choice.considered.push_back(candidate);
      }
    }
    if (rounded <= smallest || chunk == 1) break;
  }
  double fastest = std::numeric_limits<double>::infinity();
  bool found = false;
  for (size_t i = 0; i < choice.considered.size(); ++i) {
    const LayoutCandidate& candidate = choice.considered[i];
    if (candidate.within_budget && candidate.step_seconds < fastest) {
      fastest = candidate.step_seconds;
      choice.chosen = i;
      found = true;
    }
  }
  if (!found) {
    double least_compute = std::numeric_limits<double>::infinity();
    for (const LayoutCandidate& candidate : choice.considered) least_compute = std::min(least_compute, candidate.compute_bytes);
    throw Error(module,
                "no layout of S " + std::to_string(run.seq_tokens) + " fits the budget (compute " +
                    (budget.compute_bytes ? bytes(budget.compute_bytes) : std::string("unlimited")) + ", ram " +
                    (budget.ram_bytes ? bytes(budget.ram_bytes) : std::string("unlimited")) + ", disk " +
                    (budget.disk_bytes ? bytes(budget.disk_bytes) : std::string("unlimited")) + ") among the " +
                    std::to_string(choice.considered.size()) + " the planner considered; the smallest compute peak is " +
                    bytes(least_compute),
                "raise the budget, or lower the stage's seq or batch");
  }
  return choice;
}

}  // namespace fpdt::train

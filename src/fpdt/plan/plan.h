// `fpdt plan` as a library: make_plan() predicts one configuration on one machine (memory per tier
// and component, FLOPs, traffic, prefetch, step time, MFU, whether it fits); search_max_seq() finds
// the longest sequence that fits. Pure functions of their inputs: no I/O, no allocation tracking.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/plan/config.h"
#include "fpdt/plan/cost_model.h"
#include "fpdt/plan/hardware.h"
#include "fpdt/plan/memory_model.h"

namespace fpdt::plan {

struct PlanResult {
  PlanConfig config;              // as planned: chunk_tokens resolved for the fpdt modes
  Hardware hardware;
  PlanShape shape;
  std::vector<Component> components;
  TierPeak compute_peak;          // tensors only; the runtime's reserve is hardware.reserved_bytes
  TierPeak offload_peak;
  double compute_capacity_bytes = 0;  // for tensors: compute memory less the runtime's reserve
  double offload_capacity_bytes = 0;  // RAM or disk offload tier (what the compute peak leaves, when shared)
  bool fits_compute = false;
  bool fits_offload = false;
  bool fits = false;
  std::string bound;              // "" when it fits, else "compute tier" or "offload tier"
  StepFlops flops;
  StepTraffic traffic;
  Prefetch prefetch;
  StepTime time;
};

// Resolves an automatic chunk when neither C nor u is given (fpdt: the smallest valid chunk whose
// prefetch hides, or the whole sequence when none does; fpdt-reference: kReferenceChunkTokens, at most
// the sequence), validates (derive_shape) and evaluates the models.
// Throws fpdt::Error for an impossible configuration.
PlanResult make_plan(const PlanConfig& config, const Hardware& hardware);

struct MaxSeqResult {
  Mode mode = Mode::fpdt;
  OffloadKind offload = OffloadKind::ram;
  int64_t seq_tokens = 0;       // the longest S that fits; 0 when even one granule does not
  int64_t granule_tokens = 0;   // S is searched in multiples of this (ulysses: 1024·P, fpdt modes: C)
  int64_t chunk_tokens = 0;     // C used (fpdt modes)
  int64_t halved_from_tokens = 0;  // the chunk the search chose first when not even one of it fit the compute
                                   // tier and chunk_tokens is a halving of it (fpdt: its copies are then not
                                   // hidden); 0 otherwise
  std::string bound;            // what stops a longer S: "compute tier", "offload tier",
                                // "position table" or "search limit"
  double model_state_bytes = 0;       // when not even one granule fits: the compute tier's model states
  double compute_capacity_bytes = 0;  // and its capacity for tensors (PlanResult's)
};

// The longest S, a multiple of the granule, for which make_plan(config with that S) fits. The chunk of
// an fpdt mode is fixed during the search: config.chunk_tokens if set, else (fpdt) the smallest
// P·2^k at or above the hiding bound, (fpdt-reference) kReferenceChunkTokens — halved while not even one
// chunk fits the compute tier (halved_from_tokens says so). Memory grows with S, so the search doubles
// then bisects. config.seq_tokens is ignored.
MaxSeqResult search_max_seq(const PlanConfig& config, const Hardware& hardware);

// search_max_seq for ulysses, fpdt-reference and fpdt on the same model, layout and hardware; modes
// that cannot take the config's recompute, offload or optimizer offload get their own defaults (layer;
// ram; the optimizer on the device).
// When the config offloads to RAM and the hardware has a disk, a fourth entry is fpdt offloading to
// disk: a tier the reference does not have (DESIGN.md §1).
std::vector<MaxSeqResult> search_max_seq_all_modes(const PlanConfig& config, const Hardware& hardware);

}  // namespace fpdt::plan

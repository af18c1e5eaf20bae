// ZeRO's side of a step as data (DESIGN.md §2, "model states in one place"): which parameter units
// each segment of the schedule uses, which slot holds a unit's gathered weights (stage 3) or its full
// gradient (stage ≥ 2), and the model-state steps around each segment — gather (one segment ahead:
// the prefetch), wait for a gather, zero a gradient, reduce-scatter it into the shards. A pure
// function of the units' sizes, the stage and the recompute mode: the executor runs it
// (model_states.h), the memory table counts its slots (memory_layout.h), and
// `fpdt train --dry-run --schedule` prints it. Every rank makes the same plan, so the collectives it
// issues come in the same order everywhere.
//
// Segments are the schedule's calls, except that a layer's backward is two: the output projection and
// MLP backward (after the layer's forward is re-run, under --recompute layer), then the attention
// backward with the QKV projection's (the schedule marks the boundary with Op::segment). Each half
// uses one of the layer's two units (model/parameters.h), and the first half's gradients are final
// when it ends, so a layer's backward never holds its whole gradient together with both its units'
// weights and the next prefetch.
//
// Slots: one pool for gathered weights and full gradients, sized by walking the training pass (a
// forward pass is its first segments, gathering into the same slots): a unit placed in a slot takes an empty one that fits (the smallest), else evicts
// gathered weights from one that fits (those next used furthest ahead), else grows a slot (an empty
// one first, the largest), else a new slot is made. Gathered weights stay until their slot is needed (so the last layers of the forward
// are not gathered again for the first of the backward); a gradient leaves its slot when it is reduced,
// right after the last segment that adds to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/pipeline/run_spec.h"

namespace fpdt::pipeline {

// The calls of a step (schedule.h runs a program for each).
enum class CallKind : uint8_t { embed, layer_forward, head, layer_backward, embed_backward };
const char* call_kind_name(CallKind kind);
struct CallRef {
  CallKind kind;
  int layer;  // layer calls: the layer; the head: L (its input is the final hidden state); embeddings: 0
};
// embed; layer forward 0..L−1; head; and for a training pass layer backward L−1..0; embed backward.
std::vector<CallRef> call_order(int layers, bool backward);

struct ZeroStep {
  enum class Kind : uint8_t {
    gather,            // all-gather the unit's shards into slot `slot` (queued: runs ahead)
    wait,              // compute waits for the unit's gather
    zero_gradients,    // slot `slot` = 0: the unit's gradient builds up there
    reduce_gradients,  // reduce-scatter slot `slot` into the unit's gradient shards; the slot is free
  };
  Kind kind;
  int unit;
  int slot;
};

struct ZeroSlot {
  int64_t bytes;  // its largest occupant: units' floats × 4 (gradients) or × the weights' bytes
};

struct ZeroSegment {
  CallKind kind;
  int layer;
  int half;                         // a layer backward's: 0 output projection + MLP, 1 attention
  std::vector<int> units;           // whose weights it reads
  std::vector<int> gradient_units;  // whose gradients it adds to
  std::vector<ZeroStep> before, after;
};

struct ZeroPlan {
  int stage = 0;
  int layers = 0;
  std::vector<ZeroSlot> slots;  // none below stage 2
  std::vector<ZeroSegment> training, forward;
  const std::vector<ZeroSegment>& pass(bool backward) const { return backward ? training : forward; }
  // The slots, then the steps around each segment of the pass that has any.
  std::string describe(bool backward) const;
};

// unit_floats: each unit's size (ParameterLayout::units()); tied: the head uses the embeddings;
// recompute layer: a layer backward re-runs its forward first (its first half reads both units);
// weight_bytes: one gathered weight (4 fp32; the plan's bf16 2). Stages 0 and 1 have no steps and no
// slots: every rank holds all weights and gradients.
ZeroPlan make_zero_plan(const std::vector<int64_t>& unit_floats, bool tied, int stage, Recompute recompute,
                        int64_t weight_bytes = 4);

}  // namespace fpdt::pipeline

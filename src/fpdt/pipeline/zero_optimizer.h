// The optimizer step over this rank's part of the model states (model_states.h): the gradient norm and
// scale, AdamW, the finite checks — and with --offload-optimizer the update on the host's kernels and a
// thread of its own, unit by unit, each unit's update an event its next gather or use waits for.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fpdt/base/work_queue.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/parameters.h"
#include "fpdt/pipeline/working_copy.h"
#include "fpdt/pipeline/zero_collectives.h"
#include "fpdt/pipeline/zero_partition.h"

namespace fpdt::pipeline {

class ZeroOptimizer {
 public:
  ZeroOptimizer(const model::ParameterLayout& layout, const ZeroPartition& partition, ZeroCollectives& collectives,
                WorkingCopy& working_copy, kernels::Backend& backend, bool dry);
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // Whether the update runs offloaded (its arrays are host memory).
  bool offloaded() const { return host_ != nullptr; }
  // ‖g‖₂ over every rank's gradients: the same bits on every rank, whatever the stage or W.
  double gradient_norm();
  void scale_gradients(float coefficient);
  // AdamW on this rank's part, then (stages 1, 2) the weights all-gathered. Offloaded: queued.
  void adamw_update(kernels::AdamWParams hyper);
  // Waits for the update in flight; whether its weights are finite on this rank.
  bool finish_update();
  // Over every rank (after the update in flight): weights finite; moments finite, second moments ≥ 0.
  bool weights_finite();
  bool moments_valid();

  // Offloaded: the event of `unit`'s update in flight on the optimizer's thread (0: none), and a wait
  // for it (a gather of the unit, on the collectives' queue, makes it).
  WorkQueue::Event updated(int unit) const { return updated_[static_cast<size_t>(unit)]; }
  void wait_update(WorkQueue::Event event) { optimizer_queue_->wait(event); }
  // Stage 2 offloaded: waits for the all-gather of `unit`'s updated weights, if one is queued.
  void wait_weights_ready(int unit);

 private:
  // The kernels that reach the optimizer's arrays (gradient shards, moments): the host's when offloaded.
  kernels::Backend& backend() { return host_ ? *host_ : backend_; }

  const model::ParameterLayout& layout_;
  const ZeroPartition& partition_;
  ZeroCollectives& collectives_;
  WorkingCopy& working_copy_;
  kernels::Backend& backend_;
  std::unique_ptr<kernels::Backend> host_;  // the offloaded optimizer's kernels
  // The offloaded update in flight: per unit the event of its update, of its weights' all-gather (stage 2,
  // on the collectives' queue) and whether its updated weights are finite; and its thread — last, so it
  // is destroyed first: it runs what is queued while everything its tasks read still exists.
  std::vector<WorkQueue::Event> updated_, weights_ready_;
  std::vector<char> update_finite_;
  std::unique_ptr<WorkQueue> optimizer_queue_;
};

}  // namespace fpdt::pipeline

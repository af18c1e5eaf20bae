// Model states in one place (DESIGN.md §2): a model's weights, gradients and AdamW state on one rank,
// whole or sharded over the W = dp × sp ranks of the world by the ZeRO stage — the buffers of
// memory_layout.h's model-state table, allocated (or, for a dry run, only counted) exactly:
//   0  every rank holds everything; the gradients are all-reduced
//   1  + AdamW's moments sharded: each rank updates its shards, then the weights are all-gathered
//   2  + gradients reduce-scattered into shards, each unit right after the last call that adds to it,
//        so only one layer's full gradient exists at a time
//   3  + weights sharded: each unit is all-gathered into a slot before the call that uses it — one call
//        ahead, on a queue of its own that overlaps the compute — and its slot reused after
// Units are the parameter layout's (model/parameters.h): the embeddings, each layer, the head; a rank
// holds the same share of each (shard_range). The pipeline asks for a unit's weights and gradients
// around each call of a step and runs the ZeRO plan's steps there (zero_plan.h), so every stage runs the
// same executor; the trainer asks for the optimizer step and for checkpoints.
//
// bf16 runs (RunSpec::precision): beside the fp32 weights — the masters AdamW updates — a working copy
// of them as bf16 words (round_to_bf16, nearest-even), whole or this rank's shards as the weights are,
// re-made after every update, initialisation and load; the GEMMs read its words (model/layer.h), so no
// call converts a weight. At stage 3 a unit is gathered as those words into a slot's bf16 twin (half the
// fp32 bytes) with its fp32 vectors (norm weights, biases: unit_vectors in memory_layout.h) gathered
// into the fp32 slot beside them; the embeddings, which lookups read, are gathered in fp32 as in fp32 runs.
// The model uses the same values at every stage: the matrices rounded, everything else fp32.
//
// Determinism: every rank issues the same collectives in the same order, and sums run in rank order,
// so no result depends on timing. Stages 1–3 give stage 0's bits when the order of the sums is the
// same — one micro-batch per step: with gradient accumulation stage 2 and 3 sum each micro-batch over
// the ranks before adding the micro-batches. The gradient norm is a sum of float64 block sums
// (kShardBlockFloats) in one order whatever the stage or W.
//
// --offload-optimizer (stages 2, 3; as DeepSpeed's ZeRO-Offload): the gradient shards, AdamW's moments
// and fp32 master weights live in the offload tier and the update runs there, on the host's kernels
// and a thread of its own, unit by unit in the order the next pass uses them; the updated shards are
// copied back into the compute-tier weights (and, stage 2, all-gathered). adamw_update returns at once:
// the next step starts while the update runs, and a unit's gather (or, stage 2, its first use) waits
// for that unit's update only.
//
// ModelStates is the owner the pipeline and the trainer talk to; the rooms behind it each hold one idea:
// zero_partition.h (who holds which part, the table's buffers), zero_collectives.h (the gathers and
// reduce-scatters), working_copy.h (bf16 words), zero_optimizer.h (norm, AdamW, the offloaded update),
// state_checkpoint.h (checkpoint I/O). ModelStates runs the ZeRO plan's steps of a pass.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fpdt/base/work_queue.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/parameters.h"
#include "fpdt/pipeline/memory_layout.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/pipeline/working_copy.h"
#include "fpdt/pipeline/zero_collectives.h"
#include "fpdt/pipeline/zero_optimizer.h"
#include "fpdt/pipeline/zero_partition.h"
#include "fpdt/pipeline/zero_plan.h"

namespace fpdt::pipeline {

// Throws fpdt::Error for a ZeRO stage outside 0..3 or an offloaded optimizer below stage 2.
void check_zero(const RunSpec& run);
// The states' shape (memory_layout.h) of a checked run over `world_ranks` ranks: the one place a run's
// ZeRO options are read; everything below ModelStates reads the shape.
StateShape state_shape(const RunSpec& run, int world_ranks);

class ModelStates {
 public:
  // Collective over `world` (every rank constructs its states together). The weights are initialised
  // from `seed` as model::init_parameters does, gradients and moments are zero. dry: every buffer is
  // counted in its tier, none is allocated or initialised, and nothing is communicated (`world` may
  // be comm::make_dry's).
  ModelStates(const model::ModelConfig& config, kernels::Backend& backend, comm::Communicator& world,
              const RunSpec& run, uint64_t seed, bool dry = false);
  ModelStates(const ModelStates&) = delete;
  ModelStates& operator=(const ModelStates&) = delete;

  const model::ModelConfig& config() const { return config_; }
  const model::ParameterLayout& layout() const { return layout_; }
  // The run the states are for (resolved_layout): its ZeRO stage, optimizer offload, recompute, precision.
  const RunSpec& run() const { return partition_.shape().run; }
  // The ranks the states are partitioned over: W from stage 1; 1 at stage 0 (every rank holds all).
  int partition_ranks() const { return partition_.ranks(); }
  int partition_rank() const { return partition_.rank(); }
  // This rank's part of unit `unit` (floats from the unit's start): its share from stage 1, all of it
  // at stage 0. The optimizer updates it; checkpoints save its moments.
  const ShardRange& own(int unit) const { return partition_.own(unit); }
  // What this rank holds (memory_layout.h's model-state table) and its bytes in a tier.
  const std::vector<StateSpec>& table() const { return partition_.table(); }
  size_t bytes(Tier tier) const { return partition_.bytes(tier); }

  // The whole weights (below stage 3) and gradients (below stage 2); throw fpdt::Error at stages that
  // shard them. Blocks of compute-tier handles: for backend ops; the host reads them through
  // gather_weights (a GPU's, or cpu-guarded's, would crash it). Writes into weights() do not reach a
  // bf16 run's working copy: call refresh_working_copy() after them (load_weights does its own).
  model::ParameterBlock& weights();
  // A bf16 run: the working copy re-made from the weights (nothing in fp32).
  void refresh_working_copy();
  model::ParameterBlock& gradients();

  // ---- a pass of the pipeline: the ZeRO plan's steps around each segment of the schedule ----------
  const ZeroPlan& plan() const { return plan_; }
  void begin_pass(bool backward);
  void before_segment(int segment);
  void after_segment(int segment);
  // Waits for every queued collective (a pass that throws midway leaves them to the destructor).
  void end_pass();
  // A unit's weights / gradients (its first float, laid out as in the whole block) as the current call
  // sees them; null where the stage keeps them in a slot the unit is not in.
  float* unit_weights(int unit) const;
  float* unit_gradients(int unit) const;
  // A bf16 run's working copy of a unit as the current call sees it: one bf16 word per float of the
  // unit's layout; null in fp32, and where the stage keeps no words of it (a unit not in a slot; the
  // embeddings at stage 3). At stage 3 the fp32 slot holds only the vectors of a unit gathered so.
  const uint16_t* unit_weights_bf16(int unit) const;
  // Test hook: this rank's words of `unit`'s own part (own(unit).size() of them) into host memory.
  void read_working_copy(int unit, uint16_t* words);
  // Payload bytes this rank sent over ZeRO's group since construction (comm::Communicator::bytes_sent:
  // the gathers and reduce-scatters); 0 with one rank.
  uint64_t bytes_sent() const { return collectives_.bytes_sent(); }

  // ---- the optimizer step (zero_optimizer.h) -------------------------------------------------------
  // Gradients = 0, at the start of a step (the passes of its micro-batches accumulate; from stage 2 the
  // step's first reduce-scatter of a unit writes its shard, so nothing is cleared).
  void zero_gradients();
  // After the last micro-batch: stage 0 all-reduces the whole gradient, stage 1 reduce-scatters it
  // unit by unit; from stage 2 the passes have done it.
  void reduce_gradients() { collectives_.reduce_gradients(); }
  // Test hook (FPDT_TEST_FAULT nan-grad): this rank's first gradient element becomes NaN, before
  // reduce_gradients (stage 0 and 1 reduce it to every rank; from stage 2 the norm carries it).
  void poison_gradient();
  // ‖g‖₂ over every rank's gradients: the same bits on every rank, whatever the stage or W.
  double gradient_norm() { return optimizer_.gradient_norm(); }
  void scale_gradients(float coefficient) { optimizer_.scale_gradients(coefficient); }
  // AdamW on this rank's part (hyper.weight_decay on matrices and embeddings only, as train::AdamW),
  // then (stages 1, 2) the weights all-gathered. Offloaded: queued (see the top of the file).
  void adamw_update(kernels::AdamWParams hyper) { optimizer_.adamw_update(hyper); }
  // Over every rank: all weights finite (after the update in flight, if any); moments finite and
  // second moments ≥ 0. Call them between passes.
  bool weights_finite() { return optimizer_.weights_finite(); }
  bool moments_valid() { return optimizer_.moments_valid(); }

  // ---- checkpoints (collective; state_checkpoint.h) ----------------------------------------------
  // Every rank's `whole` (a block of the layout) = all the weights.
  void gather_weights(model::ParameterBlock& whole);
  // Each rank takes its part of `whole` (and its master weights, when offloaded).
  void load_weights(const model::ParameterBlock& whole);
  // This rank's moments of `unit` (own(unit).size() floats each) to / from host memory.
  void read_moments(int unit, float* m, float* v);
  void write_moments(int unit, const float* m, const float* v);

 private:
  int stage() const { return partition_.shape().run.zero; }
  void gather(int unit, int slot);
  void reduce(int unit, int slot);

  model::ModelConfig config_;
  model::ParameterLayout layout_;
  kernels::Backend& backend_;
  kernels::DeviceMemory& memory_;
  // In order of construction; destroyed in reverse: the optimizer's queued updates run first, then the
  // collectives' queue, while the buffers they read still exist.
  ZeroPartition partition_;
  WorkingCopy working_copy_;
  ZeroCollectives collectives_;
  ZeroOptimizer optimizer_;
  std::optional<model::ParameterBlock> whole_weights_, whole_gradients_;

  ZeroPlan plan_;
  const std::vector<ZeroSegment>* pass_ = nullptr;
  std::vector<int> gathered_in_;              // per unit: the slot holding its weights, or −1
  std::vector<int> gradient_in_;              // per unit: the slot holding its gradient, or −1
  std::vector<WorkQueue::Event> gather_done_; // per unit
  std::vector<char> reduced_;                 // per unit: its shard holds this step's sum already
};

}  // namespace fpdt::pipeline

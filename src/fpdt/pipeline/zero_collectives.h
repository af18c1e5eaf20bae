// ZeRO's collectives of one unit over the partition's group (model_states.h): weights all-gathered (fp32,
// or a bf16 run's words and vectors), gradients reduced or reduce-scattered — and the queue a pass runs
// them on. With one rank, compute-tier copies: the communicator would move the bytes through host code.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fpdt/base/work_queue.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/parameters.h"
#include "fpdt/pipeline/zero_partition.h"

namespace fpdt::pipeline {

class ZeroCollectives {
 public:
  // Collective over `world` (it splits ZeRO's group off it) unless dry: then nothing is communicated.
  ZeroCollectives(const model::ParameterLayout& layout, const ZeroPartition& partition, kernels::Backend& backend,
                  comm::Communicator& world, bool dry);

  // ZeRO's group, or the one-rank world.
  comm::Communicator& comm() { return *comm_; }
  // Payload bytes sent over the group since construction; 0 with one rank.
  uint64_t bytes_sent() const { return group_ ? group_->bytes_sent() : 0; }
  // Stage ≥ 2: the gathers and reduce-scatters of a pass, in plan order.
  WorkQueue& queue() { return *queue_; }
  // Waits for every queued collective (none below stage 2).
  void wait_all() {
    if (queue_) queue_->wait_all();
  }

  // `into` (the unit's layout) = every rank's `shard` of `unit`.
  void all_gather_unit(int unit, const float* shard, float* into);
  // `shard` (= or +=, by `add`) = this rank's share of Σ over the ranks of `full` (the unit's layout). The
  // offloaded optimizer's gradient shards are host memory, reduced by the communicator.
  void reduce_scatter_unit(int unit, const float* full, float* shard, bool add);
  // Stage 3 bf16: the unit's bf16 words into slot `slot`'s twin, its fp32 vectors into the slot.
  void gather_words_and_vectors(int unit, int slot);
  // After a step's last micro-batch: stage 0 all-reduces the whole gradient, stage 1 reduce-scatters it
  // unit by unit; from stage 2 the passes have done it.
  void reduce_gradients();

 private:
  const model::ParameterLayout& layout_;
  const ZeroPartition& partition_;
  kernels::Backend& backend_;
  kernels::DeviceMemory& memory_;
  std::unique_ptr<comm::Communicator> group_;  // ZeRO's own group of the world (more than one rank)
  comm::Communicator* comm_ = nullptr;         // group_, or the one-rank world
  // Per unit, every partition rank's bytes of it in fp32 and bf16: the collectives' counts, made once.
  std::vector<std::vector<size_t>> fp32_bytes_, word_bytes_;
  std::vector<std::vector<ShardRange>> vectors_;   // per unit: its fp32 vectors (unit_vectors)
  std::vector<std::vector<size_t>> vector_bytes_;  // per unit: every partition rank's vector bytes
  int64_t largest_vectors_ = 0;                    // one half of the vector staging, in floats
  std::unique_ptr<WorkQueue> queue_;
};

}  // namespace fpdt::pipeline

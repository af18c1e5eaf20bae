// Which part of each model state one rank holds under its ZeRO stage (model_states.h), and the buffers of
// memory_layout.h's model-state table that hold it: allocated and zeroed, or for a dry run only counted.
// Bookkeeping only: no collective, no arithmetic on the states.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fpdt/kernels/backend.h"
#include "fpdt/model/parameters.h"
#include "fpdt/pipeline/memory_layout.h"

namespace fpdt::pipeline {

class ZeroPartition {
 public:
  // The table of `shape` for the rank `world_rank` of a world of shape.W ranks (W = 1 below stage 1).
  ZeroPartition(const model::ParameterLayout& layout, kernels::DeviceMemory& memory, const StateShape& shape,
                int world_rank, bool dry);

  const model::ParameterLayout& layout() const { return layout_; }
  const StateShape& shape() const { return shape_; }
  int ranks() const { return static_cast<int>(shape_.W); }
  int rank() const { return rank_; }
  size_t units() const { return own_.size(); }
  // This rank's part of unit `unit` (floats from the unit's start): its share from stage 1, all of it at 0.
  const ShardRange& own(int unit) const { return own_[static_cast<size_t>(unit)]; }
  // Every partition rank's floats of unit `unit`, in rank order.
  const std::vector<size_t>& counts(int unit) const { return counts_[static_cast<size_t>(unit)]; }
  const std::vector<StateSpec>& table() const { return table_; }
  size_t bytes(Tier tier) const;

  // Whether `buffer` holds shards (else the whole array).
  bool sharded(StateBuf buffer) const;
  // The whole array `buffer` (its first float), sharded or not.
  float* array(StateBuf buffer) const { return arrays_[static_cast<size_t>(buffer)]; }
  // Unit `unit`'s part of a state array: the whole array's (from its own start) or the shard's.
  float* part(StateBuf buffer, int unit) const;
  float* slot(int index) const { return slots_[static_cast<size_t>(index)]; }
  // A bf16 run: the working copy (whole, or shards at stage 3), this rank's words of `unit`'s own part,
  // a stage-3 slot's bf16 twin and the vector staging (this rank's vectors | the gathered vectors).
  uint16_t* words() const { return words_; }
  uint16_t* own_words(int unit) const;
  uint16_t* slot_words(int index) const { return slot_words_[static_cast<size_t>(index)]; }
  float* vector_staging() const { return vector_staging_; }

 private:
  const model::ParameterLayout& layout_;
  StateShape shape_;
  int rank_ = 0;
  std::vector<ShardRange> own_;              // per unit
  std::vector<std::vector<size_t>> counts_;  // per unit: every partition rank's floats of it
  std::vector<int64_t> shard_offset_;        // per unit: where its shards start in a sharded array
  std::vector<StateSpec> table_;

  // The buffers of the table (one of the three per row), and where each array starts.
  struct Held {
    std::unique_ptr<kernels::DeviceBuffer> device;  // compute tier
    Buffer host;                                    // offload tier
    CountedBytes counted;                           // dry run
  };
  std::vector<Held> held_;
  float* arrays_[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};  // weights .. v, by StateBuf
  std::vector<float*> slots_;
  uint16_t* words_ = nullptr;
  std::vector<uint16_t*> slot_words_;
  float* vector_staging_ = nullptr;
};

}  // namespace fpdt::pipeline

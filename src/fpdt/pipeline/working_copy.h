// A bf16 run's working copy of the weights (model_states.h): one bf16 word (round_to_bf16) per fp32
// weight, whole or this rank's shards as the weights are, re-made from them after every update,
// initialisation and load. An fp32 run keeps none: every call is a no-op or answers null.
#pragma once

#include <cstdint>

#include "fpdt/kernels/backend.h"
#include "fpdt/model/parameters.h"
#include "fpdt/pipeline/zero_partition.h"

namespace fpdt::pipeline {

class WorkingCopy {
 public:
  WorkingCopy(const model::ParameterLayout& layout, const ZeroPartition& partition, kernels::Backend& backend)
      : layout_(layout), partition_(partition), backend_(backend) {}

  bool enabled() const { return partition_.shape().run.precision == kernels::Precision::bf16; }
  // Stage 3: whether `unit` is gathered as its words (with its fp32 vectors) rather than in fp32.
  bool gathers_words(int unit) const {
    return enabled() && partition_.shape().run.zero >= 3 && gathers_bf16_words(unit);
  }
  // The words of `unit` re-made from the weights this rank holds of it (whole, or the shard).
  void make(int unit);
  // The words of `unit` as a call sees them, its weights being in slot `gathered_slot` (−1: none) at
  // stage 3; null in fp32 and where the stage keeps no words of it.
  const uint16_t* unit_words(int unit, int gathered_slot) const;
  // This rank's words of `unit`'s own part (own(unit).size() of them) into host memory.
  void read(int unit, uint16_t* words) const;

 private:
  const model::ParameterLayout& layout_;
  const ZeroPartition& partition_;
  kernels::Backend& backend_;
};

}  // namespace fpdt::pipeline

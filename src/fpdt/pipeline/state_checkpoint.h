// Checkpoint I/O of the model states (collective where the weights are sharded): the whole weights
// gathered into, or each rank's part taken from, a block of host memory; a unit's AdamW moments on this
// rank to and from host memory. The caller lets an offloaded update finish first (model_states.h).
#pragma once

#include "fpdt/kernels/backend.h"
#include "fpdt/model/parameters.h"
#include "fpdt/pipeline/zero_collectives.h"
#include "fpdt/pipeline/zero_partition.h"

namespace fpdt::pipeline {

// Every rank's `whole` (a block of the layout) = all the weights.
void gather_whole_weights(const ZeroPartition& partition, ZeroCollectives& collectives,
                          kernels::DeviceMemory& memory, model::ParameterBlock& whole);
// This rank takes its part of `whole` into the weights (and the master weights, when offloaded); a bf16
// run's working copy is then stale.
void load_whole_weights(const ZeroPartition& partition, kernels::DeviceMemory& memory,
                        const model::ParameterBlock& whole);
// This rank's moments of `unit` (own(unit).size() floats each) to / from host memory; m and v may be
// null where the rank owns none of the unit.
void download_moments(const ZeroPartition& partition, kernels::DeviceMemory& memory, int unit, float* m, float* v);
void upload_moments(const ZeroPartition& partition, kernels::DeviceMemory& memory, int unit, const float* m,
                    const float* v);

}  // namespace fpdt::pipeline

// Checkpoint I/O of the model states (see state_checkpoint.h): downloads, uploads and, at stage 3, the
// all-gathers of the weights' shards into host memory.
#include "fpdt/pipeline/state_checkpoint.h"

#include <cstring>

namespace fpdt::pipeline {

namespace {

// Whether the optimizer's arrays (moments, master weights) are host memory: an offloaded optimizer's.
bool optimizer_offloaded(const ZeroPartition& partition) { return partition.shape().run.offload_optimizer; }

}  // namespace

void gather_whole_weights(const ZeroPartition& partition, ZeroCollectives& collectives,
                          kernels::DeviceMemory& memory, model::ParameterBlock& whole) {
  const model::ParameterLayout& layout = partition.layout();
  if (partition.shape().run.zero <= 2) {
    memory.download(whole.data(), partition.array(StateBuf::weights),
                    static_cast<size_t>(layout.total_numel()) * sizeof(float));
    return;
  }
  for (size_t u = 0; u < partition.units(); ++u) {
    const int unit = static_cast<int>(u);
    const float* mine = partition.part(StateBuf::weights, unit);
    float* into = whole.data() + layout.units()[u].begin;  // host memory
    if (collectives.comm().size() > 1)
      collectives.all_gather_unit(unit, mine, into);
    else
      memory.download(into, mine, static_cast<size_t>(partition.own(unit).size()) * sizeof(float));
  }
}

void load_whole_weights(const ZeroPartition& partition, kernels::DeviceMemory& memory,
                        const model::ParameterBlock& whole) {
  const model::ParameterLayout& layout = partition.layout();
  if (partition.shape().run.zero <= 2)
    memory.upload(partition.array(StateBuf::weights), whole.data(),
                  static_cast<size_t>(layout.total_numel()) * sizeof(float));
  for (size_t u = 0; u < partition.units(); ++u) {
    const int unit = static_cast<int>(u);
    const float* from = whole.data() + layout.units()[u].begin + partition.own(unit).begin;
    const size_t bytes = static_cast<size_t>(partition.own(unit).size()) * sizeof(float);
    if (partition.shape().run.zero >= 3) memory.upload(partition.part(StateBuf::weights, unit), from, bytes);
    if (optimizer_offloaded(partition)) std::memcpy(partition.part(StateBuf::master, unit), from, bytes);
  }
}

void download_moments(const ZeroPartition& partition, kernels::DeviceMemory& memory, int unit, float* m, float* v) {
  const size_t bytes = static_cast<size_t>(partition.own(unit).size()) * sizeof(float);
  if (bytes == 0) return;
  if (optimizer_offloaded(partition)) {
    std::memcpy(m, partition.part(StateBuf::m, unit), bytes);
    std::memcpy(v, partition.part(StateBuf::v, unit), bytes);
  } else {
    memory.download(m, partition.part(StateBuf::m, unit), bytes);
    memory.download(v, partition.part(StateBuf::v, unit), bytes);
  }
}

void upload_moments(const ZeroPartition& partition, kernels::DeviceMemory& memory, int unit, const float* m,
                    const float* v) {
  const size_t bytes = static_cast<size_t>(partition.own(unit).size()) * sizeof(float);
  if (bytes == 0) return;
  if (optimizer_offloaded(partition)) {
    std::memcpy(partition.part(StateBuf::m, unit), m, bytes);
    std::memcpy(partition.part(StateBuf::v, unit), v, bytes);
  } else {
    memory.upload(partition.part(StateBuf::m, unit), m, bytes);
    memory.upload(partition.part(StateBuf::v, unit), v, bytes);
  }
}

}  // namespace fpdt::pipeline

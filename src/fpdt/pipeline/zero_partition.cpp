// The ZeRO partition (see zero_partition.h): each unit's shard ranges and the table's buffers, allocated
// in the table's order.
#include "fpdt/pipeline/zero_partition.h"

#include <cstring>
#include <string>

namespace fpdt::pipeline {

ZeroPartition::ZeroPartition(const model::ParameterLayout& layout, kernels::DeviceMemory& memory,
                             const StateShape& shape, int world_rank, bool dry)
    : layout_(layout), shape_(shape), rank_(shape.run.zero >= 1 ? world_rank : 0) {
  int64_t shards = 0;
  for (const model::ParameterUnit& unit : layout_.units()) {
    own_.push_back(shard_range(unit.numel(), shape_.W, rank_));
    std::vector<size_t> counts;
    for (int r = 0; r < ranks(); ++r)
      counts.push_back(static_cast<size_t>(shard_range(unit.numel(), shape_.W, r).size()));
    counts_.push_back(std::move(counts));
    shard_offset_.push_back(shards);
    shards += shard_floats(unit.numel(), shape_.W);
  }

  table_ = model_state_buffers(layout_, shape_);
  const std::string hint =
      "shard the model states over more ranks (--zero, --dp, --sp), offload the optimizer (--offload-optimizer ram) "
      "or raise the tier's limit";
  for (const StateSpec& spec : table_) {
    Held held;
    float* data = nullptr;
    const size_t bytes = static_cast<size_t>(spec.bytes());
    const std::string what = "model states: " + spec.name;
    if (dry) {
      held.counted = CountedBytes(spec.tier, bytes, what, hint);
    } else if (spec.tier == Tier::compute) {
      held.device = memory.allocate(bytes, what, hint);
      data = static_cast<float*>(held.device->data());
      memory.fill_zero(data, bytes);
    } else {
      held.host = Buffer(Tier::offload, bytes, what, hint);
      data = held.host.as<float>();
      std::memset(data, 0, bytes);
    }
    switch (spec.id) {
      case StateBuf::slot: slots_.push_back(data); break;
      case StateBuf::weights_bf16: words_ = reinterpret_cast<uint16_t*>(data); break;
      case StateBuf::slot_bf16: slot_words_.push_back(reinterpret_cast<uint16_t*>(data)); break;
      case StateBuf::vector_staging: vector_staging_ = data; break;
      default: arrays_[static_cast<size_t>(spec.id)] = data;
    }
    held_.push_back(std::move(held));
  }
}

size_t ZeroPartition::bytes(Tier tier) const {
  size_t total = 0;
  for (const StateSpec& spec : table_)
    if (spec.tier == tier) total += static_cast<size_t>(spec.bytes());
  return total;
}

bool ZeroPartition::sharded(StateBuf buffer) const {
  switch (buffer) {
    case StateBuf::weights: return shape_.run.zero >= 3;
    case StateBuf::gradients: return shape_.run.zero >= 2;
    default: return shape_.run.zero >= 1;
  }
}

float* ZeroPartition::part(StateBuf buffer, int unit) const {
  float* array = this->array(buffer);
  const size_t u = static_cast<size_t>(unit);
  return sharded(buffer) ? array + shard_offset_[u] : array + layout_.units()[u].begin + own_[u].begin;
}

uint16_t* ZeroPartition::own_words(int unit) const {
  const size_t u = static_cast<size_t>(unit);
  return shape_.run.zero >= 3 ? words_ + shard_offset_[u] : words_ + layout_.units()[u].begin + own_[u].begin;
}

}  // namespace fpdt::pipeline

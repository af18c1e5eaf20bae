// ZeRO's collectives of a unit (see zero_collectives.h): over the group; with one rank, copies (and adds)
// in the compute tier.
#include "fpdt/pipeline/zero_collectives.h"

#include <algorithm>

namespace fpdt::pipeline {

ZeroCollectives::ZeroCollectives(const model::ParameterLayout& layout, const ZeroPartition& partition,
                                 kernels::Backend& backend, comm::Communicator& world, bool dry)
    : layout_(layout), partition_(partition), backend_(backend), memory_(backend.memory()) {
  for (size_t u = 0; u < partition_.units(); ++u) {
    std::vector<size_t> fp32_bytes, word_bytes;
    for (size_t count : partition_.counts(static_cast<int>(u))) {
      fp32_bytes.push_back(count * sizeof(float));
      word_bytes.push_back(count * sizeof(uint16_t));
    }
    fp32_bytes_.push_back(std::move(fp32_bytes));
    word_bytes_.push_back(std::move(word_bytes));
  }
  for (size_t u = 0; u < partition_.units(); ++u) {  // stage 3 bf16: each partition rank's floats of the unit's vectors
    vectors_.push_back(unit_vectors(layout_, static_cast<int>(u)));
    const std::vector<ShardRange>& vectors = vectors_.back();
    std::vector<size_t> bytes;
    for (int r = 0; r < partition_.ranks(); ++r) {
      const ShardRange range = shard_range(layout_.units()[u].numel(), partition_.ranks(), r);
      int64_t floats = 0;
      for (const ShardRange& vector : vectors)
        floats += std::max<int64_t>(0, std::min(vector.end, range.end) - std::max(vector.begin, range.begin));
      bytes.push_back(static_cast<size_t>(floats) * sizeof(float));
    }
    vector_bytes_.push_back(std::move(bytes));
  }
  largest_vectors_ = largest_unit_vectors(layout_);
  if (dry) return;

  if (world.size() > 1) group_ = world.split(0, world.rank());
  comm_ = group_ ? group_.get() : &world;
  // Its tasks copy and add in the backend's memory: the thread computes on the backend's device.
  if (partition_.shape().run.zero >= 2)
    queue_ = std::make_unique<WorkQueue>([&memory = memory_] { memory.bind_thread(); });
}

void ZeroCollectives::all_gather_unit(int unit, const float* shard, float* into) {
  if (comm_->size() > 1) return comm_->all_gather_v(shard, into, fp32_bytes_[static_cast<size_t>(unit)].data());
  if (into != shard) memory_.copy(into, shard, partition_.counts(unit)[0] * sizeof(float));
}

void ZeroCollectives::reduce_scatter_unit(int unit, const float* full, float* shard, bool add) {
  if (comm_->size() > 1 || partition_.shape().run.offload_optimizer)
    return comm_->reduce_scatter_sum(full, shard, partition_.counts(unit).data(), add);
  const size_t n = partition_.counts(unit)[0];
  if (add)
    backend_.add_inplace(shard, full, static_cast<int64_t>(n));
  else if (shard != full)
    memory_.copy(shard, full, n * sizeof(float));
}

// The words: one all-gather of every rank's shard of the unit (half the fp32 bytes). The vectors: each
// rank's pieces of them packed in unit order, all-gathered (so the result is every vector of the unit in
// unit order), then copied to their places in the fp32 slot.
void ZeroCollectives::gather_words_and_vectors(int unit, int slot) {
  const size_t u = static_cast<size_t>(unit);
  const ShardRange& own = partition_.own(unit);
  const float* shard = partition_.part(StateBuf::weights, unit);  // (own.size())
  float* into = partition_.slot(slot);                            // the unit's layout, fp32
  const std::vector<ShardRange>& vectors = vectors_[u];
  if (comm_->size() == 1) {
    memory_.copy(partition_.slot_words(slot), partition_.own_words(unit), static_cast<size_t>(own.size()) * 2);
    for (const ShardRange& vector : vectors)
      memory_.copy(into + vector.begin, shard + vector.begin, static_cast<size_t>(vector.size()) * sizeof(float));
    return;
  }
  comm_->all_gather_v(partition_.own_words(unit), partition_.slot_words(slot), word_bytes_[u].data());
  float* mine = partition_.vector_staging();                         // (vector_bytes_[u][rank] / 4 floats)
  float* gathered = partition_.vector_staging() + largest_vectors_;  // (Σ vectors of the unit)
  int64_t packed = 0;
  for (const ShardRange& vector : vectors) {
    const int64_t begin = std::max(vector.begin, own.begin), end = std::min(vector.end, own.end);
    if (begin >= end) continue;
    memory_.copy(mine + packed, shard + (begin - own.begin), static_cast<size_t>(end - begin) * sizeof(float));
    packed += end - begin;
  }
  comm_->all_gather_v(mine, gathered, vector_bytes_[u].data());
  int64_t at = 0;
  for (const ShardRange& vector : vectors) {
    memory_.copy(into + vector.begin, gathered + at, static_cast<size_t>(vector.size()) * sizeof(float));
    at += vector.size();
  }
}

void ZeroCollectives::reduce_gradients() {
  float* gradients = partition_.array(StateBuf::gradients);
  if (partition_.shape().run.zero == 0) {
    if (comm_->size() > 1) comm_->all_reduce_sum(gradients, static_cast<size_t>(layout_.total_numel()));
  } else if (partition_.shape().run.zero == 1) {
    for (size_t u = 0; u < layout_.units().size(); ++u)
      reduce_scatter_unit(static_cast<int>(u), gradients + layout_.units()[u].begin,
                          partition_.part(StateBuf::gradients, static_cast<int>(u)), false);
  }
}

}  // namespace fpdt::pipeline

// A dry run's memory table, schedule and peaks (see dry_run.h).
#include "fpdt/train/dry_run.h"

#include <cstdio>
#include <utility>

#include "fpdt/base/checked_math.h"
#include "fpdt/machine/process.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::train {

namespace {

// What a state buffer is, for the dry run's table.
const char* state_kind(pipeline::StateBuf buffer) {
  switch (buffer) {
    case pipeline::StateBuf::weights: return "params";
    case pipeline::StateBuf::gradients: return "grads";
    case pipeline::StateBuf::slot: return "params + grads (ZeRO slots)";
    case pipeline::StateBuf::weights_bf16:
    case pipeline::StateBuf::slot_bf16:
    case pipeline::StateBuf::vector_staging: return "params (bf16 working copy)";
    default: return "optimizer";
  }
}

}  // namespace

TrainResult dry_run_result(pipeline::FpdtModel& model, const pipeline::ModelStates& states, const TrainSettings& s,
                           int rank, TrainResult result) {
  model.dry_run(s.run.seq_tokens, static_cast<int>(s.run.batch_size));
  if (s.print_schedule && rank == 0) {
    std::fputs(model.schedule_for(s.run.seq_tokens, pipeline::Pass::forward_backward).describe().c_str(), stdout);
    std::fputs(states.plan().describe(true).c_str(), stdout);
  }
  for (const pipeline::StateSpec& spec : states.table())
    result.memory.push_back({"model states: " + spec.name, state_kind(spec.id), spec.tier,
                             static_cast<size_t>(spec.bytes())});
  const pipeline::LayoutShape shape = model.layout_shape(s.run.seq_tokens, static_cast<int>(s.run.batch_size));
  result.memory.push_back({"chunk buffers (one arena)", "chunk buffers", Tier::compute,
                           kernels::transfer_bytes(pipeline::chunk_arena_bytes(shape))});
  const Tier store_tier = model.run().offload.kind == pipeline::OffloadKind::none ? Tier::compute : Tier::offload;
  const std::pair<pipeline::StoreGroup, const char*> groups[] = {
      {pipeline::StoreGroup::inputs, "store: layer inputs"},
      {pipeline::StoreGroup::activations, "store: layer activations"},
      {pipeline::StoreGroup::gradients, "store: gradients of the layer in backward"}};
  for (const auto& [group, name] : groups)
    result.memory.push_back({name, "store", store_tier, pipeline::store_bytes(shape, group)});
  result.compute_peak_bytes = MemoryTiers::instance().usage(Tier::compute).peak_bytes;
  result.offload_peak_bytes = MemoryTiers::instance().usage(Tier::offload).peak_bytes;
  result.peak_rss_bytes = machine::peak_rss_bytes();
  result.chunk_plan = model.plan();
  // Every sequence-parallel rank's peaks: this rank's, with its arena and store replaced by that rank's.
  const std::vector<pipeline::RankLayout> ranks = pipeline::rank_layouts(shape, model.config());
  const pipeline::RankLayout& mine = ranks.at(static_cast<size_t>(model.plan().rank));
  for (const pipeline::RankLayout& rank : ranks) {
    TrainResult::SpRank entry{rank, result.compute_peak_bytes - mine.arena_bytes + rank.arena_bytes,
                              result.offload_peak_bytes};
    size_t& store_peak = store_tier == Tier::compute ? entry.compute_peak_bytes : entry.offload_peak_bytes;
    store_peak = store_peak - mine.store_bytes + rank.store_bytes;
    result.sp_ranks.push_back(entry);
  }
  // A step: --grad-accum micro-batches, each moving what the one laid out moves.
  const pipeline::OffloadTraffic& micro = model.traffic();
  const uint64_t micro_batches = static_cast<uint64_t>(s.grad_accum);
  pipeline::OffloadTraffic& step = result.offload_per_step;
  step.overflow = micro.overflow || !checked_mul(step.read_bytes, micro.read_bytes, micro_batches) ||
                  !checked_mul(step.written_bytes, micro.written_bytes, micro_batches);
  return result;
}

}  // namespace fpdt::train

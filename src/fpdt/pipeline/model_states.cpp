// Model states (see model_states.h): the owner's construction and initial weights, and the ZeRO plan's
// steps of a pass; the optimizer step and checkpoint I/O are handed to the rooms that hold them.
#include "fpdt/pipeline/model_states.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/base/trace.h"
#include "fpdt/pipeline/state_checkpoint.h"

namespace fpdt::pipeline {

namespace {

constexpr const char* kModule = "zero";

}  // namespace

void check_zero(const RunSpec& run) {
  if (run.zero < 0 || run.zero > 3)
    throw Error(kModule, "ZeRO stage " + std::to_string(run.zero) + " does not exist", "use --zero 0, 1, 2 or 3");
  if (run.offload_optimizer && run.zero < 2)
    throw Error(kModule,
                "--offload-optimizer needs --zero 2 or 3: the offloaded update reads the gradient shards, which "
                "stage " + std::to_string(run.zero) + " does not make",
                "add --zero 2 (or 3)");
  FPDT_CHECK(!run.forward_only || (run.zero == 0 && !run.offload_optimizer), kModule,
             "forward-only model states are never sharded", "");
}

StateShape state_shape(const RunSpec& run, int world_ranks) {
  check_zero(run);
  return StateShape{resolved_layout(run), partition_ranks(run, world_ranks)};
}

ModelStates::ModelStates(const model::ModelConfig& config, kernels::Backend& backend, comm::Communicator& world,
                         const RunSpec& run, uint64_t seed, bool dry)
    : config_(config),
      layout_((config.validate(), config)),
      backend_(backend),
      memory_(backend.memory()),
      partition_(layout_, memory_, state_shape(run, world.size()), world.rank(), dry),
      working_copy_(layout_, partition_, backend_),
      collectives_(layout_, partition_, backend_, world, dry),
      optimizer_(layout_, partition_, collectives_, working_copy_, backend_, dry),
      plan_(zero_plan(layout_, partition_.shape())) {
  const size_t units = layout_.units().size();
  gathered_in_.assign(units, -1);
  gradient_in_.assign(units, -1);
  gather_done_.assign(units, 0);
  reduced_.assign(units, 0);
  if (dry) return;

  const StateShape& shape = partition_.shape();
  if (shape.run.zero <= 2) whole_weights_.emplace(layout_, partition_.array(StateBuf::weights));
  if (shape.run.zero <= 1 && !shape.run.forward_only) whole_gradients_.emplace(layout_, partition_.array(StateBuf::gradients));

  // The weights as init_parameters makes them: one stream of random numbers over the units in order,
  // each unit made in host memory and uploaded (whole below stage 3, this rank's share at 3).
  Rng rng(seed);
  int64_t largest = 0;
  for (const model::ParameterUnit& unit : layout_.units()) largest = std::max(largest, unit.numel());
  Buffer staging(Tier::offload, static_cast<size_t>(largest) * sizeof(float), "weight initialisation (one unit)",
                 "raise --offload-mem");
  for (size_t u = 0; u < units; ++u) {
    const model::ParameterUnit& unit = layout_.units()[u];
    const ShardRange& own = partition_.own(static_cast<int>(u));
    std::memset(staging.data(), 0, static_cast<size_t>(unit.numel()) * sizeof(float));
    model::init_parameters(config_, layout_, unit.begin, unit.end, staging.as<float>(), rng);
    if (shape.run.zero <= 2)
      memory_.upload(partition_.array(StateBuf::weights) + unit.begin, staging.as<float>(),
                     static_cast<size_t>(unit.numel()) * sizeof(float));
    else
      memory_.upload(partition_.part(StateBuf::weights, static_cast<int>(u)), staging.as<float>() + own.begin,
                     static_cast<size_t>(own.size()) * sizeof(float));
  }
  if (partition_.array(StateBuf::master) != nullptr)
    for (size_t u = 0; u < units; ++u)
      memory_.download(partition_.part(StateBuf::master, static_cast<int>(u)),
                       partition_.part(StateBuf::weights, static_cast<int>(u)),
                       static_cast<size_t>(partition_.own(static_cast<int>(u)).size()) * sizeof(float));
  for (size_t u = 0; u < units; ++u) working_copy_.make(static_cast<int>(u));
}

model::ParameterBlock& ModelStates::weights() {
  if (!whole_weights_)
    throw Error(kModule, "ZeRO stage 3 keeps no whole copy of the weights on a rank",
                "gather_weights() assembles them (a checkpoint does)");
  return *whole_weights_;
}

model::ParameterBlock& ModelStates::gradients() {
  if (partition_.shape().run.forward_only)
    throw Error(kModule, "forward-only model states hold no gradients", "build the model for training");
  if (!whole_gradients_)
    throw Error(kModule, "from ZeRO stage 2 the gradients are sharded; no rank holds them whole",
                "read this rank's shards through the optimizer step");
  return *whole_gradients_;
}

void ModelStates::refresh_working_copy() {
  optimizer_.finish_update();
  for (size_t u = 0; u < partition_.units(); ++u) working_copy_.make(static_cast<int>(u));
}

void ModelStates::read_working_copy(int unit, uint16_t* words) {
  optimizer_.finish_update();
  working_copy_.read(unit, words);
}

// ---- a pass ---------------------------------------------------------------------------------------------

void ModelStates::begin_pass(bool backward) {
  pass_ = &plan_.pass(backward);
  std::fill(gathered_in_.begin(), gathered_in_.end(), -1);  // the slots hold the weights of an earlier step
  std::fill(gradient_in_.begin(), gradient_in_.end(), -1);
}

void ModelStates::end_pass() {
  collectives_.wait_all();
  pass_ = nullptr;
}

void ModelStates::gather(int unit, int slot) {
  for (int& held : gathered_in_)
    if (held == slot) held = -1;  // the unit it held leaves
  gathered_in_[static_cast<size_t>(unit)] = slot;
  const float* shard = partition_.part(StateBuf::weights, unit);
  float* into = partition_.slot(slot);
  const WorkQueue::Event updated = optimizer_.updated(unit);
  gather_done_[static_cast<size_t>(unit)] = collectives_.queue().submit([this, unit, slot, shard, into, updated] {
    if (updated != 0) optimizer_.wait_update(updated);  // the offloaded update of this unit
    const trace::Span span("gather weights", "comm");
    if (working_copy_.gathers_words(unit))
      collectives_.gather_words_and_vectors(unit, slot);
    else
      collectives_.all_gather_unit(unit, shard, into);
  });
}

void ModelStates::reduce(int unit, int slot) {
  const float* full = partition_.slot(slot);
  float* shard = partition_.part(StateBuf::gradients, unit);
  const bool add = reduced_[static_cast<size_t>(unit)] != 0;
  WorkQueue& queue = collectives_.queue();
  queue.wait(queue.submit([this, unit, full, shard, add] {
    const trace::Span span("reduce-scatter gradients", "comm");
    collectives_.reduce_scatter_unit(unit, full, shard, add);
  }));
  reduced_[static_cast<size_t>(unit)] = 1;
  gradient_in_[static_cast<size_t>(unit)] = -1;
}

void ModelStates::before_segment(int segment) {
  for (int unit : (*pass_)[static_cast<size_t>(segment)].units)  // stage 2: its offloaded update's all-gather
    optimizer_.wait_weights_ready(unit);
  for (const ZeroStep& step : (*pass_)[static_cast<size_t>(segment)].before) {
    const size_t unit = static_cast<size_t>(step.unit);
    switch (step.kind) {
      case ZeroStep::Kind::gather: gather(step.unit, step.slot); break;
      case ZeroStep::Kind::wait: collectives_.queue().wait(gather_done_[unit]); break;
      case ZeroStep::Kind::zero_gradients:
        for (int& held : gathered_in_)
          if (held == step.slot) held = -1;  // the weights it held leave
        gradient_in_[unit] = step.slot;
        memory_.fill_zero(partition_.slot(step.slot),
                          static_cast<size_t>(layout_.units()[unit].numel()) * sizeof(float));
        break;
      case ZeroStep::Kind::reduce_gradients: FPDT_ASSERT(false);
    }
  }
}

void ModelStates::after_segment(int segment) {
  for (const ZeroStep& step : (*pass_)[static_cast<size_t>(segment)].after) {
    FPDT_ASSERT(step.kind == ZeroStep::Kind::reduce_gradients);
    reduce(step.unit, step.slot);
  }
}

float* ModelStates::unit_weights(int unit) const {
  const size_t u = static_cast<size_t>(unit);
  if (stage() <= 2) return partition_.array(StateBuf::weights) + layout_.units()[u].begin;
  return gathered_in_[u] < 0 ? nullptr : partition_.slot(gathered_in_[u]);
}

const uint16_t* ModelStates::unit_weights_bf16(int unit) const {
  return working_copy_.unit_words(unit, gathered_in_[static_cast<size_t>(unit)]);
}

float* ModelStates::unit_gradients(int unit) const {
  const size_t u = static_cast<size_t>(unit);
  if (partition_.shape().run.forward_only) return nullptr;
  if (stage() <= 1) return partition_.array(StateBuf::gradients) + layout_.units()[u].begin;
  return gradient_in_[u] < 0 ? nullptr : partition_.slot(gradient_in_[u]);
}

// ---- the optimizer step ---------------------------------------------------------------------------------

void ModelStates::zero_gradients() {
  std::fill(reduced_.begin(), reduced_.end(), 0);
  if (stage() >= 2) return;  // the step's first reduce-scatter of each unit writes its shard
  memory_.fill_zero(partition_.array(StateBuf::gradients), static_cast<size_t>(layout_.total_numel()) * sizeof(float));
}

void ModelStates::poison_gradient() {
  float* first = stage() <= 1 ? partition_.array(StateBuf::gradients) : partition_.part(StateBuf::gradients, 0);
  if (stage() >= 2 && own(0).size() == 0) return;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (table()[1].tier == Tier::offload)
    *first = nan;
  else
    memory_.upload(first, &nan, sizeof nan);
}

// ---- checkpoints ----------------------------------------------------------------------------------------

void ModelStates::gather_weights(model::ParameterBlock& whole) {
  optimizer_.finish_update();
  gather_whole_weights(partition_, collectives_, memory_, whole);
}

void ModelStates::load_weights(const model::ParameterBlock& whole) {
  load_whole_weights(partition_, memory_, whole);
  refresh_working_copy();
}

void ModelStates::read_moments(int unit, float* m, float* v) {
  optimizer_.finish_update();
  download_moments(partition_, memory_, unit, m, v);
}

void ModelStates::write_moments(int unit, const float* m, const float* v) {
  upload_moments(partition_, memory_, unit, m, v);
}

}  // namespace fpdt::pipeline

// Model states (see model_states.h): the table's buffers, the ZeRO plan's steps of a pass, the
// optimizer step over this rank's part, and the checkpoint gathers.
#include "fpdt/pipeline/model_states.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/base/trace.h"

namespace fpdt::pipeline {

namespace {

constexpr const char* kModule = "zero";

// Whether no element of x (n) is invalid, asked of the backend that holds x.
bool none_invalid(kernels::Backend& backend, const float* x, int64_t n, bool negative_invalid) {
  int64_t invalid = 0;
  backend.count_invalid(&invalid, x, n, negative_invalid);
  return invalid == 0;
}

}  // namespace

ZeroConfig zero_config(const RunSpec& run) {
  const RunSpec layout = resolved_layout(run);
  return ZeroConfig{run.zero, run.offload_optimizer, layout.recompute == Recompute::layer, run.forward_only,
                    run.precision};
}

void check_zero(const ZeroConfig& zero) {
  if (zero.stage < 0 || zero.stage > 3)
    throw Error(kModule, "ZeRO stage " + std::to_string(zero.stage) + " does not exist", "use --zero 0, 1, 2 or 3");
  if (zero.offload_optimizer && zero.stage < 2)
    throw Error(kModule,
                "--offload-optimizer needs --zero 2 or 3: the offloaded update reads the gradient shards, which "
                "stage " + std::to_string(zero.stage) + " does not make",
                "add --zero 2 (or 3)");
  FPDT_CHECK(!zero.weights_only || (zero.stage == 0 && !zero.offload_optimizer), kModule,
             "forward-only model states are never sharded", "");
}

ModelStates::ModelStates(const model::ModelConfig& config, kernels::Backend& backend, comm::Communicator& world,
                         const ZeroConfig& zero, uint64_t seed, bool dry)
    : config_(config),
      layout_((config.validate(), config)),
      backend_(backend),
      memory_(backend.memory()),
      zero_(zero),
      dry_(dry) {
  check_zero(zero_);
  partition_ranks_ = zero_.stage >= 1 ? world.size() : 1;
  partition_rank_ = zero_.stage >= 1 ? world.rank() : 0;
  int64_t shards = 0;
  for (const model::ParameterUnit& unit : layout_.units()) {
    own_.push_back(shard_range(unit.numel(), partition_ranks_, partition_rank_));
    std::vector<size_t> counts, fp32_bytes, word_bytes;
    for (int r = 0; r < partition_ranks_; ++r) {
      counts.push_back(static_cast<size_t>(shard_range(unit.numel(), partition_ranks_, r).size()));
      fp32_bytes.push_back(counts.back() * sizeof(float));
      word_bytes.push_back(counts.back() * sizeof(uint16_t));
    }
    counts_.push_back(std::move(counts));
    fp32_bytes_.push_back(std::move(fp32_bytes));
    word_bytes_.push_back(std::move(word_bytes));
    shard_offset_.push_back(shards);
    shards += shard_floats(unit.numel(), partition_ranks_);
  }
  const size_t units = layout_.units().size();
  gathered_in_.assign(units, -1);
  gradient_in_.assign(units, -1);
  gather_done_.assign(units, 0);
  reduced_.assign(units, 0);
  updated_.assign(units, 0);
  weights_ready_.assign(units, 0);
  update_finite_.assign(units, 1);

  StateShape shape;
  shape.stage = zero_.stage;
  shape.W = partition_ranks_;
  shape.offload_optimizer = zero_.offload_optimizer;
  shape.recompute_layer = zero_.recompute_layer;
  shape.weights_only = zero_.weights_only;
  shape.bf16_working_copy = bf16();
  plan_ = zero_plan(layout_, shape);
  table_ = model_state_buffers(layout_, shape);
  const std::string hint =
      "shard the model states over more ranks (--zero, --dp, --sp), offload the optimizer (--offload-optimizer ram) "
      "or raise the tier's limit";
  for (const StateSpec& spec : table_) {
    Held held;
    float* data = nullptr;
    const size_t bytes = static_cast<size_t>(spec.bytes());
    const std::string what = "model states: " + spec.name;
    if (dry_) {
      held.counted = CountedBytes(spec.tier, bytes, what, hint);
    } else if (spec.tier == Tier::compute) {
      held.device = memory_.allocate(bytes, what, hint);
      data = static_cast<float*>(held.device->data());
      memory_.fill_zero(data, bytes);
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
  for (size_t u = 0; u < units; ++u) {  // stage 3 bf16: each partition rank's floats of the unit's vectors
    vectors_.push_back(unit_vectors(layout_, static_cast<int>(u)));
    const std::vector<ShardRange>& vectors = vectors_.back();
    std::vector<size_t> bytes;
    for (int r = 0; r < partition_ranks_; ++r) {
      const ShardRange range = shard_range(layout_.units()[u].numel(), partition_ranks_, r);
      int64_t floats = 0;
      for (const ShardRange& vector : vectors)
        floats += std::max<int64_t>(0, std::min(vector.end, range.end) - std::max(vector.begin, range.begin));
      bytes.push_back(static_cast<size_t>(floats) * sizeof(float));
    }
    vector_bytes_.push_back(std::move(bytes));
  }
  largest_vectors_ = largest_unit_vectors(layout_);
  if (dry_) return;

  if (zero_.stage <= 2) whole_weights_.emplace(layout_, arrays_[static_cast<size_t>(StateBuf::weights)]);
  if (zero_.stage <= 1 && !zero_.weights_only)
    whole_gradients_.emplace(layout_, arrays_[static_cast<size_t>(StateBuf::gradients)]);
  if (world.size() > 1) group_ = world.split(0, world.rank());
  comm_ = group_ ? group_.get() : &world;
  if (zero_.stage >= 2) queue_ = std::make_unique<WorkQueue>();
  if (zero_.offload_optimizer) {
    host_ = kernels::make_backend(kernels::BackendKind::cpu);
    optimizer_queue_ = std::make_unique<WorkQueue>();
  }

  // The weights as init_parameters makes them: one stream of random numbers over the units in order,
  // each unit made in host memory and uploaded (whole below stage 3, this rank's share at 3).
  Rng rng(seed);
  int64_t largest = 0;
  for (const model::ParameterUnit& unit : layout_.units()) largest = std::max(largest, unit.numel());
  Buffer staging(Tier::offload, static_cast<size_t>(largest) * sizeof(float), "weight initialisation (one unit)",
                 "raise --offload-mem");
  for (size_t u = 0; u < units; ++u) {
    const model::ParameterUnit& unit = layout_.units()[u];
    std::memset(staging.data(), 0, static_cast<size_t>(unit.numel()) * sizeof(float));
    model::init_parameters(config_, layout_, unit.begin, unit.end, staging.as<float>(), rng);
    if (zero_.stage <= 2)
      memory_.upload(arrays_[static_cast<size_t>(StateBuf::weights)] + unit.begin, staging.as<float>(),
                     static_cast<size_t>(unit.numel()) * sizeof(float));
    else
      memory_.upload(part(StateBuf::weights, static_cast<int>(u)), staging.as<float>() + own_[u].begin,
                     static_cast<size_t>(own_[u].size()) * sizeof(float));
  }
  if (arrays_[static_cast<size_t>(StateBuf::master)] != nullptr)
    for (size_t u = 0; u < units; ++u)
      memory_.download(part(StateBuf::master, static_cast<int>(u)), part(StateBuf::weights, static_cast<int>(u)),
                       static_cast<size_t>(own_[u].size()) * sizeof(float));
  for (size_t u = 0; u < units; ++u) make_working_copy(static_cast<int>(u));
}

ModelStates::~ModelStates() {
  // Queued updates and collectives still read and write the buffers: let them finish (a failed one is
  // not rethrown; a collective waiting on an update is queued after it).
  optimizer_queue_.reset();
  queue_.reset();
}

size_t ModelStates::bytes(Tier tier) const {
  size_t total = 0;
  for (const StateSpec& spec : table_)
    if (spec.tier == tier) total += static_cast<size_t>(spec.bytes());
  return total;
}

model::ParameterBlock& ModelStates::weights() {
  if (!whole_weights_)
    throw Error(kModule, "ZeRO stage 3 keeps no whole copy of the weights on a rank",
                "gather_weights() assembles them (a checkpoint does)");
  return *whole_weights_;
}

model::ParameterBlock& ModelStates::gradients() {
  if (zero_.weights_only)
    throw Error(kModule, "forward-only model states hold no gradients", "build the model for training");
  if (!whole_gradients_)
    throw Error(kModule, "from ZeRO stage 2 the gradients are sharded; no rank holds them whole",
                "read this rank's shards through the optimizer step");
  return *whole_gradients_;
}

bool ModelStates::sharded(StateBuf buffer) const {
  switch (buffer) {
    case StateBuf::weights: return zero_.stage >= 3;
    case StateBuf::gradients: return zero_.stage >= 2;
    default: return zero_.stage >= 1;
  }
}

float* ModelStates::part(StateBuf buffer, int unit) const {
  float* array = arrays_[static_cast<size_t>(buffer)];
  const size_t u = static_cast<size_t>(unit);
  return sharded(buffer) ? array + shard_offset_[u] : array + layout_.units()[u].begin + own_[u].begin;
}

// ---- ZeRO's collectives of a unit ------------------------------------------------------------------------
// Over the group; with one rank, copies (and adds) in the compute tier: the communicator's would move the
// bytes through host code, which cannot read a GPU's memory. The offloaded optimizer's gradient shards are
// host memory, reduced by the communicator (one GPU does not offload it: train/settings.h).

void ModelStates::all_gather_unit(int unit, const float* shard, float* into) {
  if (comm_->size() > 1) return comm_->all_gather_v(shard, into, fp32_bytes_[static_cast<size_t>(unit)].data());
  if (into != shard) memory_.copy(into, shard, counts_[static_cast<size_t>(unit)][0] * sizeof(float));
}

void ModelStates::reduce_scatter_unit(int unit, const float* full, float* shard, bool add) {
  if (comm_->size() > 1 || host_)
    return comm_->reduce_scatter_sum(full, shard, counts_[static_cast<size_t>(unit)].data(), add);
  const size_t n = counts_[static_cast<size_t>(unit)][0];
  if (add)
    backend_.add_inplace(shard, full, static_cast<int64_t>(n));
  else if (shard != full)
    memory_.copy(shard, full, n * sizeof(float));
}

// ---- a pass ---------------------------------------------------------------------------------------------

void ModelStates::begin_pass(bool backward) {
  pass_ = &plan_.pass(backward);
  std::fill(gathered_in_.begin(), gathered_in_.end(), -1);  // the slots hold the weights of an earlier step
  std::fill(gradient_in_.begin(), gradient_in_.end(), -1);
}

void ModelStates::end_pass() {
  if (queue_) queue_->wait_all();
  pass_ = nullptr;
}

void ModelStates::gather(int unit, int slot) {
  for (int& held : gathered_in_)
    if (held == slot) held = -1;  // the unit it held leaves
  gathered_in_[static_cast<size_t>(unit)] = slot;
  const float* shard = part(StateBuf::weights, unit);
  float* into = this->slot(slot);
  const WorkQueue::Event updated = updated_[static_cast<size_t>(unit)];
  gather_done_[static_cast<size_t>(unit)] = queue_->submit([this, unit, slot, shard, into, updated] {
    if (updated != 0) optimizer_queue_->wait(updated);  // the offloaded update of this unit
    const trace::Span span("gather weights", "comm");
    if (gathers_words(unit))
      gather_words_and_vectors(unit, slot);
    else
      all_gather_unit(unit, shard, into);
  });
}

// The words: one all-gather of every rank's shard of the unit (half the fp32 bytes). The vectors: each
// rank's pieces of them packed in unit order, all-gathered (so the result is every vector of the unit in
// unit order), then copied to their places in the fp32 slot. With one rank, compute-tier copies.
void ModelStates::gather_words_and_vectors(int unit, int slot) {
  const size_t u = static_cast<size_t>(unit);
  const ShardRange& own = own_[u];
  const float* shard = part(StateBuf::weights, unit);  // (own.size())
  float* into = this->slot(slot);                      // the unit's layout, fp32
  const std::vector<ShardRange>& vectors = vectors_[u];
  if (comm_->size() == 1) {
    memory_.copy(slot_words_[static_cast<size_t>(slot)], own_words(unit), static_cast<size_t>(own.size()) * 2);
    for (const ShardRange& vector : vectors)
      memory_.copy(into + vector.begin, shard + vector.begin, static_cast<size_t>(vector.size()) * sizeof(float));
    return;
  }
  comm_->all_gather_v(own_words(unit), slot_words_[static_cast<size_t>(slot)], word_bytes_[u].data());
  float* mine = vector_staging_;                         // (vector_bytes_[u][rank] / 4 floats)
  float* gathered = vector_staging_ + largest_vectors_;  // (Σ vectors of the unit)
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

void ModelStates::reduce(int unit, int slot) {
  const float* full = this->slot(slot);
  float* shard = part(StateBuf::gradients, unit);
  const bool add = reduced_[static_cast<size_t>(unit)] != 0;
  queue_->wait(queue_->submit([this, unit, full, shard, add] {
    const trace::Span span("reduce-scatter gradients", "comm");
    reduce_scatter_unit(unit, full, shard, add);
  }));
  reduced_[static_cast<size_t>(unit)] = 1;
  gradient_in_[static_cast<size_t>(unit)] = -1;
}

void ModelStates::before_segment(int segment) {
  for (int unit : (*pass_)[static_cast<size_t>(segment)].units) {  // stage 2: its offloaded update's all-gather
    WorkQueue::Event& ready = weights_ready_[static_cast<size_t>(unit)];
    if (ready != 0) queue_->wait(ready);
    ready = 0;
  }
  for (const ZeroStep& step : (*pass_)[static_cast<size_t>(segment)].before) {
    const size_t unit = static_cast<size_t>(step.unit);
    switch (step.kind) {
      case ZeroStep::Kind::gather: gather(step.unit, step.slot); break;
      case ZeroStep::Kind::wait: queue_->wait(gather_done_[unit]); break;
      case ZeroStep::Kind::zero_gradients:
        for (int& held : gathered_in_)
          if (held == step.slot) held = -1;  // the weights it held leave
        gradient_in_[unit] = step.slot;
        memory_.fill_zero(slot(step.slot), static_cast<size_t>(layout_.units()[unit].numel()) * sizeof(float));
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
  if (zero_.stage <= 2) return arrays_[static_cast<size_t>(StateBuf::weights)] + layout_.units()[u].begin;
  return gathered_in_[u] < 0 ? nullptr : slot(gathered_in_[u]);
}

const uint16_t* ModelStates::unit_weights_bf16(int unit) const {
  const size_t u = static_cast<size_t>(unit);
  if (!bf16()) return nullptr;
  if (zero_.stage <= 2) return words_ + layout_.units()[u].begin;
  if (!gathers_words(unit) || gathered_in_[u] < 0) return nullptr;
  return slot_words_[static_cast<size_t>(gathered_in_[u])];
}

uint16_t* ModelStates::own_words(int unit) const {
  const size_t u = static_cast<size_t>(unit);
  return zero_.stage >= 3 ? words_ + shard_offset_[u] : words_ + layout_.units()[u].begin + own_[u].begin;
}

void ModelStates::make_working_copy(int unit) {
  if (!bf16()) return;
  const size_t u = static_cast<size_t>(unit);
  if (zero_.stage <= 2)  // the whole unit: every rank holds every weight
    backend_.pack_bf16(words_ + layout_.units()[u].begin, arrays_[static_cast<size_t>(StateBuf::weights)] +
                                                              layout_.units()[u].begin, layout_.units()[u].numel());
  else
    backend_.pack_bf16(own_words(unit), part(StateBuf::weights, unit), own_[u].size());
}

void ModelStates::refresh_working_copy() {
  finish_update();
  for (size_t u = 0; u < own_.size(); ++u) make_working_copy(static_cast<int>(u));
}

void ModelStates::read_working_copy(int unit, uint16_t* words) {
  finish_update();
  FPDT_CHECK(bf16(), kModule, "an fp32 run keeps no bf16 working copy", "run with --precision bf16");
  memory_.download(words, own_words(unit), static_cast<size_t>(own(unit).size()) * 2);
}

float* ModelStates::unit_gradients(int unit) const {
  const size_t u = static_cast<size_t>(unit);
  if (zero_.weights_only) return nullptr;
  if (zero_.stage <= 1) return arrays_[static_cast<size_t>(StateBuf::gradients)] + layout_.units()[u].begin;
  return gradient_in_[u] < 0 ? nullptr : slot(gradient_in_[u]);
}

// ---- the optimizer step ---------------------------------------------------------------------------------

void ModelStates::zero_gradients() {
  std::fill(reduced_.begin(), reduced_.end(), 0);
  if (zero_.stage >= 2) return;  // the step's first reduce-scatter of each unit writes its shard
  memory_.fill_zero(arrays_[static_cast<size_t>(StateBuf::gradients)],
                    static_cast<size_t>(layout_.total_numel()) * sizeof(float));
}

void ModelStates::reduce_gradients() {
  if (zero_.stage == 0) {
    if (comm_->size() > 1)
      comm_->all_reduce_sum(arrays_[static_cast<size_t>(StateBuf::gradients)],
                            static_cast<size_t>(layout_.total_numel()));
  } else if (zero_.stage == 1) {
    float* gradients = arrays_[static_cast<size_t>(StateBuf::gradients)];
    for (size_t u = 0; u < layout_.units().size(); ++u)
      reduce_scatter_unit(static_cast<int>(u), gradients + layout_.units()[u].begin,
                          part(StateBuf::gradients, static_cast<int>(u)), false);
  }
}

void ModelStates::poison_gradient() {
  float* first = zero_.stage <= 1 ? arrays_[static_cast<size_t>(StateBuf::gradients)] : part(StateBuf::gradients, 0);
  if (zero_.stage >= 2 && own_[0].size() == 0) return;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (table_[1].tier == Tier::offload)
    *first = nan;
  else
    memory_.upload(first, &nan, sizeof nan);
}

double ModelStates::gradient_norm() {
  // This rank's block sums, unit by unit; then everyone's, summed unit by unit, rank by rank, block by
  // block: the order of the whole gradient's blocks, whatever the partition.
  std::vector<double> mine;
  for (size_t u = 0; u < own_.size(); ++u) {
    const size_t first = mine.size();
    mine.resize(first + static_cast<size_t>((own_[u].size() + kShardBlockFloats - 1) / kShardBlockFloats));
    optimizer_backend().sum_squares(mine.data() + first, part(StateBuf::gradients, static_cast<int>(u)),
                                   own_[u].size(), kShardBlockFloats);
  }
  double total = 0.0;
  if (partition_ranks_ == 1) {
    for (double sum : mine) total += sum;
    return std::sqrt(total);
  }
  const size_t ranks = static_cast<size_t>(partition_ranks_), units = own_.size();
  auto blocks = [&](size_t u, size_t r) { return (counts_[u][r] + kShardBlockFloats - 1) / kShardBlockFloats; };
  std::vector<size_t> bytes(ranks, 0), rank_begin(ranks + 1, 0);  // in doubles
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t u = 0; u < units; ++u) rank_begin[r + 1] += blocks(u, r);
    rank_begin[r + 1] += rank_begin[r];
    bytes[r] = (rank_begin[r + 1] - rank_begin[r]) * sizeof(double);
  }
  std::vector<double> everyone(rank_begin[ranks]);
  comm_->all_gather_v(mine.data(), everyone.data(), bytes.data());
  std::vector<size_t> cursor(rank_begin.begin(), rank_begin.end() - 1);
  for (size_t u = 0; u < units; ++u)
    for (size_t r = 0; r < ranks; ++r)
      for (size_t b = 0; b < blocks(u, r); ++b) total += everyone[cursor[r]++];
  return std::sqrt(total);
}

void ModelStates::scale_gradients(float coefficient) {
  for (size_t u = 0; u < own_.size(); ++u)
    optimizer_backend().scale_inplace(part(StateBuf::gradients, static_cast<int>(u)), coefficient, own_[u].size());
}

void ModelStates::adamw_update(kernels::AdamWParams hyper) {
  const double decay = hyper.weight_decay;
  // The tensors' pieces in this rank's part of `unit`, with their weight decay.
  auto update_unit = [this, decay, hyper](int unit, kernels::Backend& kernels, StateBuf params) mutable {
    const ShardRange& own = own_[static_cast<size_t>(unit)];
    const int64_t base = layout_.units()[static_cast<size_t>(unit)].begin + own.begin;
    for (const model::ParameterInfo& info : layout_.tensors()) {
      const int64_t begin = std::max(info.offset, base), end = std::min(info.offset + info.numel(), base + own.size());
      if (begin >= end) continue;
      hyper.weight_decay = info.is_matrix() ? decay : 0.0;
      const int64_t at = begin - base;
      kernels.adamw_update(part(params, unit) + at, part(StateBuf::m, unit) + at, part(StateBuf::v, unit) + at,
                           part(StateBuf::gradients, unit) + at, end - begin, hyper);
    }
  };
  const int units = static_cast<int>(own_.size());
  if (host_) {
    // On the optimizer's thread, unit by unit in the order a pass first uses them (the embeddings,
    // the layers, the head: the layout's order); a unit's gather or first use waits for it alone.
    for (int unit = 0; unit < units; ++unit) {
      updated_[static_cast<size_t>(unit)] = optimizer_queue_->submit([this, unit, update_unit]() mutable {
        const trace::Span span("optimizer update (offloaded)", "copy");
        update_unit(unit, *host_, StateBuf::master);
        const float* master = part(StateBuf::master, unit);
        const int64_t n = own_[static_cast<size_t>(unit)].size();
        update_finite_[static_cast<size_t>(unit)] = none_invalid(*host_, master, n, false);
        memory_.upload(part(StateBuf::weights, unit), master, static_cast<size_t>(n) * sizeof(float));
        if (zero_.stage >= 3) make_working_copy(unit);  // its shard's words (stage 2: after the all-gather)
      });
      if (zero_.stage == 2) {
        float* whole = arrays_[static_cast<size_t>(StateBuf::weights)] + layout_.units()[static_cast<size_t>(unit)].begin;
        const float* mine = part(StateBuf::weights, unit);
        const WorkQueue::Event updated = updated_[static_cast<size_t>(unit)];
        weights_ready_[static_cast<size_t>(unit)] = queue_->submit([this, unit, whole, mine, updated] {
          optimizer_queue_->wait(updated);
          const trace::Span span("gather weights", "comm");
          all_gather_unit(unit, mine, whole);
          make_working_copy(unit);
        });
      }
    }
    return;
  }
  for (int unit = 0; unit < units; ++unit) update_unit(unit, backend_, StateBuf::weights);
  if (zero_.stage == 1 || zero_.stage == 2) {
    float* whole = arrays_[static_cast<size_t>(StateBuf::weights)];
    for (int unit = 0; unit < units; ++unit)
      all_gather_unit(unit, part(StateBuf::weights, unit), whole + layout_.units()[static_cast<size_t>(unit)].begin);
  }
  for (int unit = 0; unit < units; ++unit) make_working_copy(unit);
}

bool ModelStates::finish_update() {
  if (!optimizer_queue_) return true;
  optimizer_queue_->wait_all();
  queue_->wait_all();  // stage 2's all-gathers
  std::fill(updated_.begin(), updated_.end(), 0);
  std::fill(weights_ready_.begin(), weights_ready_.end(), 0);
  return std::all_of(update_finite_.begin(), update_finite_.end(), [](char finite) { return finite != 0; });
}

namespace {

// Whether `every` rank's verdict is true (a rank's false makes it false everywhere).
bool everywhere(comm::Communicator& comm, bool mine) {
  double bad = mine ? 0.0 : 1.0;
  if (comm.size() > 1) comm.all_reduce_sum(&bad, 1);
  return bad == 0.0;
}

}  // namespace

bool ModelStates::weights_finite() {
  bool finite = finish_update();
  for (size_t u = 0; u < own_.size(); ++u)
    finite &= none_invalid(backend_, part(StateBuf::weights, static_cast<int>(u)), own_[u].size(), false);
  return everywhere(*comm_, finite);
}

bool ModelStates::moments_valid() {
  bool valid = finish_update();
  for (size_t u = 0; u < own_.size(); ++u) {
    valid &= none_invalid(optimizer_backend(), part(StateBuf::m, static_cast<int>(u)), own_[u].size(), false);
    valid &= none_invalid(optimizer_backend(), part(StateBuf::v, static_cast<int>(u)), own_[u].size(), true);
  }
  return everywhere(*comm_, valid);
}

// ---- checkpoints ----------------------------------------------------------------------------------------

void ModelStates::gather_weights(model::ParameterBlock& whole) {
  finish_update();
  if (zero_.stage <= 2) {
    memory_.download(whole.data(), arrays_[static_cast<size_t>(StateBuf::weights)],
                     static_cast<size_t>(layout_.total_numel()) * sizeof(float));
    return;
  }
  for (size_t u = 0; u < own_.size(); ++u) {
    const float* mine = part(StateBuf::weights, static_cast<int>(u));
    float* into = whole.data() + layout_.units()[u].begin;  // host memory
    if (comm_->size() > 1)
      comm_->all_gather_v(mine, into, fp32_bytes_[u].data());
    else
      memory_.download(into, mine, static_cast<size_t>(own_[u].size()) * sizeof(float));
  }
}

void ModelStates::load_weights(const model::ParameterBlock& whole) {
  if (zero_.stage <= 2)
    memory_.upload(arrays_[static_cast<size_t>(StateBuf::weights)], whole.data(),
                   static_cast<size_t>(layout_.total_numel()) * sizeof(float));
  for (size_t u = 0; u < own_.size(); ++u) {
    const float* from = whole.data() + layout_.units()[u].begin + own_[u].begin;
    const size_t bytes = static_cast<size_t>(own_[u].size()) * sizeof(float);
    if (zero_.stage >= 3) memory_.upload(part(StateBuf::weights, static_cast<int>(u)), from, bytes);
    if (host_) std::memcpy(part(StateBuf::master, static_cast<int>(u)), from, bytes);
  }
  refresh_working_copy();
}

void ModelStates::read_moments(int unit, float* m, float* v) {
  finish_update();
  const size_t bytes = static_cast<size_t>(own(unit).size()) * sizeof(float);
  if (bytes == 0) return;  // this rank owns none of the unit: m and v may be null
  if (host_) {
    std::memcpy(m, part(StateBuf::m, unit), bytes);
    std::memcpy(v, part(StateBuf::v, unit), bytes);
  } else {
    memory_.download(m, part(StateBuf::m, unit), bytes);
    memory_.download(v, part(StateBuf::v, unit), bytes);
  }
}

void ModelStates::write_moments(int unit, const float* m, const float* v) {
  const size_t bytes = static_cast<size_t>(own(unit).size()) * sizeof(float);
  if (bytes == 0) return;  // this rank owns none of the unit: m and v may be null
  if (host_) {
    std::memcpy(part(StateBuf::m, unit), m, bytes);
    std::memcpy(part(StateBuf::v, unit), v, bytes);
  } else {
    memory_.upload(part(StateBuf::m, unit), m, bytes);
    memory_.upload(part(StateBuf::v, unit), v, bytes);
  }
}

}  // namespace fpdt::pipeline

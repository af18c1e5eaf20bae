// The FPDT pipeline (see fpdt_model.h): the layout of a step's memory, and the executor that walks
// the schedule. Each step names its buffers and store slots; the executor resolves them to handles
// and calls the model's maths, the kernels, the exchange or the copy queue — in the schedule's order.
#include "fpdt/pipeline/fpdt_model.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "fpdt/base/error.h"
#include "fpdt/base/trace.h"

namespace fpdt::pipeline {

namespace {
constexpr int32_t kPaddingDocument = INT32_MIN;  // the document of padding tokens: only each other

// The states of a model that has its own: every rank holds everything (stage 0, nothing offloaded).
RunSpec own_states_spec(RunSpec run) {
  run.zero = 0;
  run.offload_optimizer = false;
  return run;
}

// Bytes of one token's attention output on each rank p (H_p·D floats): what decoding gathers.
std::vector<size_t> head_output_bytes(const HeadSharding& sharding, int head_dim) {
  std::vector<size_t> bytes;
  for (int p = 0; p < sharding.ranks; ++p)
    bytes.push_back(sizeof(float) * static_cast<size_t>(sharding.q_head_count(p)) * head_dim);
  return bytes;
}

}  // namespace

FpdtModel::FpdtModel(const model::ModelConfig& config, kernels::Backend& backend, comm::Communicator& sp,
                     const RunSpec& run, uint64_t seed)
    : config_(config),
      backend_(backend),
      memory_(backend.memory()),
      sp_(sp),
      run_(resolved_layout(run)),
      own_world_(comm::make_local()),
      own_states_(std::make_unique<ModelStates>(config, backend, *own_world_, own_states_spec(run_), seed)),
      states_(*own_states_),
      math_(config_, backend_, run_.precision),
      sharding_(make_head_sharding(config.heads, config.kv_heads, sp.size(), sp.rank())),
      head_output_bytes_(head_output_bytes(sharding_, config.head_dim)) {}

FpdtModel::FpdtModel(const model::ModelConfig& config, kernels::Backend& backend, comm::Communicator& sp,
                     const RunSpec& run, ModelStates& states)
    : config_(config),
      backend_(backend),
      memory_(backend.memory()),
      sp_(sp),
      run_(resolved_layout(run)),
      states_(states),
      math_(config_, backend_, run_.precision),
      sharding_(make_head_sharding(config.heads, config.kv_heads, sp.size(), sp.rank())),
      head_output_bytes_(head_output_bytes(sharding_, config.head_dim)) {
  FPDT_CHECK(states.run().recompute == run_.recompute, "pipeline",
             "the model states were planned for another --recompute than the pipeline's", "");
}

FpdtModel::~FpdtModel() {
  // Drain the copy queue before the buffers and storage its copies use are freed. Never throws.
  copies_.reset();
}

ChunkPlan FpdtModel::plan_for(int64_t seq_tokens) const {
  if (config_.learned_positions() && seq_tokens > config_.max_positions)
    throw Error("pipeline",
                "sequence of " + std::to_string(seq_tokens) + " tokens exceeds the " +
                    std::to_string(config_.max_positions) + " learned positions of model '" + config_.name + "'",
                "lower --seq or use a RoPE (Llama) model");
  return plan_chunks(run_, seq_tokens, sp_.size(), sp_.rank());
}

Schedule FpdtModel::schedule_for(int64_t seq_tokens, Pass pass, const int32_t* doc_ids, int batch) const {
  const ChunkPlan plan = plan_for(seq_tokens);
  std::vector<BlockMask> masks;
  for (int layer = 0; layer < config_.layers; ++layer)
    masks.push_back(make_block_mask(plan, config_.window(layer), doc_ids, batch));
  return make_schedule(plan, pass, run_.recompute, masks, mlp_kept(), bf16_store(), cache_chunks_ > 0);
}

LayoutShape run_layout_shape(const model::ModelConfig& config, const RunSpec& run, const HeadSharding& sharding,
                             const ChunkPlan& plan, int batch, int64_t cache_chunks) {
  LayoutShape shape = layout_shape(config, sharding, plan, batch, run.recompute == Recompute::layer ? 1 : config.layers,
                                   stored_activation_bytes(run.precision), run_keeps_mlp_activations(run),
                                   !run.forward_only);
  shape.cache_chunks = cache_chunks;
  return shape;
}

// A forward-only layout stores nothing for a backward, the MLP's activations neither.
bool run_keeps_mlp_activations(const RunSpec& run) {
  return !run.forward_only && keep_mlp_activations(run.offload.kind == OffloadKind::none, run.recompute);
}

LayoutShape FpdtModel::layout_shape(int64_t seq_tokens, int batch, int64_t cache_chunks) const {
  return run_layout_shape(config_, run_, sharding_, plan_for(seq_tokens), batch, cache_chunks);
}

bool FpdtModel::mlp_kept() const { return run_keeps_mlp_activations(run_); }

void FpdtModel::reserve(int64_t seq_tokens, int batch, bool dry, int64_t cache_chunks) {
  if (arena_ && plan_.seq_tokens == seq_tokens && batch_size_ == batch && dry_ == dry &&
      cache_chunks_ == cache_chunks)
    return;
  copies_.reset();  // waits for (and forgets) the copies of the old layout
  exchange_.reset();
  arena_.reset();
  dry_arena_ = CountedBytes();
  store_.reset();
  schedule_ = Schedule{};
  const LayoutShape shape = layout_shape(seq_tokens, batch, cache_chunks);
  plan_ = plan_for(seq_tokens);
  batch_size_ = batch;
  dry_ = dry;
  cache_chunks_ = cache_chunks;
  cached_tokens_ = 0;

  store_ = std::make_unique<OffloadStore>(memory_, run_.offload, shape, dry);
  const std::string what = "FPDT chunk buffers (" + std::to_string(shape.rows()) + " token rows per chunk)";
  const std::string hint = "lower --chunk-tokens or --batch, or raise --compute-mem";
  if (dry)
    dry_arena_ = CountedBytes(Tier::compute, kernels::transfer_bytes(chunk_arena_bytes(shape)), what, hint);
  else
    arena_ = memory_.allocate(chunk_arena_bytes(shape), what, hint);
  char* slice = dry ? nullptr : static_cast<char*>(arena_->data());  // a handle: only offsets are taken from it
  for (const BufferSpec& buffer : chunk_buffers(shape)) {
    const size_t id = static_cast<size_t>(buffer.id);
    own_[id] = slice;
    bytes_[id] = static_cast<size_t>(buffer.elements * element_bytes(buffer.element, shape));
    if (slice != nullptr) slice += buffer.bytes(shape);
  }
  bound_ = own_;
  head_rows_ = head_rows(shape);
  if (!dry)  // a dry run never exchanges
    exchange_ = std::make_unique<UlyssesExchange>(sp_, backend_, sharding_, config_.head_dim, shape.c,
                                                  own<float>(Buf::pack), own<int32_t>(Buf::exchange_rows));
  copies_ = memory_.make_copy_queue();
  last_event_ = 0;
  // A chunk's host staging rows; a dry run moves no data, so it lays out any length without them.
  const size_t rows = dry ? 0 : static_cast<size_t>(shape.rows());
  host_tokens_.resize(rows);
  host_targets_.resize(rows);
  host_position_ids_.resize(rows);
  host_positions_.resize(rows);
  host_mask_.resize(rows);
  host_losses_.resize(rows);
  host_predictions_.resize(rows);
  host_docs_.resize(rows * static_cast<size_t>(shape.P));
  std::vector<int64_t> windows;  // counted in closed form: a schedule of u chunks holds O(u²) steps
  for (int layer = 0; layer < config_.layers && dry; ++layer) windows.push_back(config_.window(layer));
  traffic_ = dry ? schedule_traffic(count_copies(plan_, run_.forward_only ? Pass::forward : Pass::forward_backward,
                                                 run_.recompute, windows, mlp_kept(), cache_chunks_ > 0),
                                    *store_)
                 : OffloadTraffic{};
}

// ---- the executor -----------------------------------------------------------------------------------

model::LossStats FpdtModel::run(const model::Batch& batch, Pass pass, double grad_scale, const TokenOutputs& outputs) {
  FPDT_CHECK(pass == Pass::forward || !run_.forward_only, "pipeline",
             "this model is laid out for forward passes only (evaluation); a training step needs the backward's store",
             "build the model with RunSpec::forward_only = false to train it");
  model::check_batch(config_, batch);
  reserve(batch.T, batch.B, false);
  return execute_pass(batch, pass, grad_scale, outputs);
}

model::LossStats FpdtModel::execute_pass(const model::Batch& batch, Pass pass, double grad_scale,
                                         const TokenOutputs& outputs) {
  Schedule with_documents;
  const Schedule* schedule = &schedule_;
  if (batch.doc_ids != nullptr) {  // the live blocks depend on the batch
    with_documents = schedule_for(batch.T, pass, batch.doc_ids, batch.B);
    schedule = &with_documents;
  } else if (schedule_.programs.empty() || schedule_.pass != pass) {
    schedule_ = schedule_for(batch.T, pass);
  }
  batch_ = &batch;
  documents_ = batch.doc_ids != nullptr;
  grad_scale_ = grad_scale;
  outputs_ = outputs;
  memory_.fill_zero(own<double>(Buf::loss_sums), 2 * sizeof(double));  // the head's chunks add to them
  traffic_ = OffloadTraffic{};
  const bool backward = pass == Pass::forward_backward;
  states_.begin_pass(backward);
  segment_ = 0;
  for (const Schedule::Call& call : schedule->calls) {
    call_ = &call;
    states_.before_segment(segment_);
    bind_tensors();
    execute(schedule->programs[call.program], call.layer);
    states_.after_segment(segment_++);
  }
  FPDT_ASSERT(static_cast<size_t>(segment_) == states_.plan().pass(backward).size());
  copies_->wait_all();
  states_.end_pass();
  batch_ = nullptr;
  double loss_sums[2];  // read back once a pass
  memory_.download(loss_sums, own<double>(Buf::loss_sums), sizeof loss_sums);
  return model::LossStats{loss_sums[0], loss_sums[1]};
}

model::GlobalTensors FpdtModel::embedding_weights() const {
  return model::global_tensors(states_.layout(), states_.unit_weights(model::ParameterLayout::kEmbeddingUnit), nullptr);
}

model::LayerTensors FpdtModel::layer_weights(int layer) const {
  const int qkv = model::ParameterLayout::qkv_unit(layer), mlp = model::ParameterLayout::mlp_unit(layer);
  return model::layer_tensors(states_.layout(), layer, states_.unit_weights(qkv), states_.unit_weights(mlp),
                              states_.unit_weights_bf16(qkv), states_.unit_weights_bf16(mlp));
}

model::GlobalTensors FpdtModel::head_weights() const {
  const int embeddings = model::ParameterLayout::kEmbeddingUnit, head = states_.layout().head_unit();
  const bool tied = config_.tie_embeddings;
  return model::global_tensors(states_.layout(), tied ? states_.unit_weights(embeddings) : nullptr,
                               states_.unit_weights(head), states_.unit_weights_bf16(tied ? embeddings : head));
}

void FpdtModel::bind_tensors() {
  const Schedule::Call& call = *call_;
  const model::ParameterLayout& layout = states_.layout();
  const int embeddings = model::ParameterLayout::kEmbeddingUnit, head = layout.head_unit();
  const bool tied = config_.tie_embeddings;
  switch (call.kind) {
    case CallKind::embed: global_weights_ = embedding_weights(); return;
    case CallKind::layer_forward:
    case CallKind::layer_backward: {
      const int qkv = model::ParameterLayout::qkv_unit(call.layer), mlp = model::ParameterLayout::mlp_unit(call.layer);
      weights_ = layer_weights(call.layer);
      gradients_ = model::layer_tensors(layout, call.layer, states_.unit_gradients(qkv), states_.unit_gradients(mlp));
      return;
    }
    case CallKind::head:
      global_weights_ = head_weights();
      global_gradients_ = model::global_tensors(layout, tied ? states_.unit_gradients(embeddings) : nullptr,
                                                states_.unit_gradients(head));
      return;
    case CallKind::embed_backward:
      global_gradients_ = model::global_tensors(layout, states_.unit_gradients(embeddings), nullptr);
      return;
  }
}

void FpdtModel::execute(const Program& program, int layer) {
  const kernels::CopyEvent before_program = last_event_;
  events_.assign(static_cast<size_t>(program.copies), 0);
  place_outputs(program, layer);
  for (size_t n = 0; n < program.steps.size(); ++n) execute(program.steps[n], placements_[n], layer, before_program);
}

namespace {
bool is_exchange(Op op) {
  return op == Op::q_to_heads || op == Op::kv_to_heads || op == Op::q_to_sequence || op == Op::kv_grad_to_sequence;
}
}  // namespace

void FpdtModel::place_outputs(const Program& program, int layer) {
  const std::vector<Step>& steps = program.steps;
  placements_.assign(steps.size(), StepPlacements{});
  if (!store_->resident()) return;
  auto role_of = [](const Step& step, Buf buffer) {  // how the step uses the buffer (none: not at all)
    Role role = Role::none;
    for (int k = 0; k < kMaxOperands; ++k)
      if (step.buffers[k] == buffer && operand_role(step, k) != Role::none)
        role = role == Role::none ? operand_role(step, k) : Role::inout;
    return role;
  };
  struct Producer {
    int step = -1, operand = -1;
  };
  std::array<Producer, kBufCount> producer{};  // the output of each buffer not yet written out
  std::vector<Producer> alias_source(steps.size());  // an aliasing all-to-all's: its input's producer
  for (size_t n = 0; n < steps.size(); ++n) {
    const Step& step = steps[n];
    if (step.op == Op::write) {
      const size_t first = static_cast<size_t>(step.buffer(Operand::buffer));
      Producer p = producer[first];
      // Through all-to-alls that are aliases, back to the step that computed the data.
      while (p.step >= 0 && placements_[p.step][p.operand].alias)
        p = alias_source[static_cast<size_t>(p.step)];
      const int slot_layer = step.layer == LayerRef::next_layer ? layer + 1 : layer;
      if (p.step >= 0 && placements_[p.step][p.operand].array == Array::count &&
          store_->slot_bytes(step.array) == bytes_[first] && store_->resident(step.array, slot_layer, step.chunk))
        placements_[p.step][p.operand] = Placement{step.array, step.layer, step.chunk};
      producer[first] = Producer{};  // a second write of the same output copies from the first's slot
      continue;
    }
    if (step.op == Op::fetch) {
      producer[static_cast<size_t>(step.buffer(Operand::buffer))] = Producer{};  // bound to the fetched slot
      continue;
    }
    const Buf from = is_exchange(step.op) ? step.buffer(Operand::from) : Buf::none;
    const Buf to = is_exchange(step.op) ? step.buffer(Operand::to) : Buf::none;
    if (is_exchange(step.op) && sharding_.ranks == 1 &&
        bytes_[static_cast<size_t>(from)] == bytes_[static_cast<size_t>(to)]) {
      // Alias unless the input changes while the output is live (until its last read before it is
      // produced again), or the output is updated in place.
      bool safe = true;
      size_t last_read = n;
      for (size_t m = n + 1; m < steps.size() && safe; ++m) {
        const Role role = role_of(steps[m], to);
        if (role == Role::out) break;
        if (role == Role::inout) safe = false;
        if (role == Role::in) last_read = m;
      }
      for (size_t m = n + 1; m <= last_read && safe; ++m) {
        const Role role = role_of(steps[m], from);
        if (role == Role::out || role == Role::inout) safe = false;
      }
      if (safe) {
        placements_[n][static_cast<size_t>(signature(step.op).position(Operand::to))].alias = true;
        alias_source[n] = producer[static_cast<size_t>(from)];
      }
    }
    for (int k = 0; k < kMaxOperands; ++k)
      if (step.buffers[k] != Buf::none && operand_role(step, k) == Role::out)
        producer[static_cast<size_t>(step.buffers[k])] = Producer{static_cast<int>(n), k};
  }
}

float* FpdtModel::out(Buf buffer, const Placement& placement, int layer) {
  const size_t index = static_cast<size_t>(buffer);
  FPDT_ASSERT(!placement.alias);
  if (placement.array == Array::count) {
    bound_[index] = own_[index];
  } else {
    bound_[index] = store_->resident(placement.array,
                                     placement.layer == LayerRef::next_layer ? layer + 1 : layer, placement.chunk);
  }
  return static_cast<float*>(bound_[index]);
}

namespace {

// A step's operands by role, each bound as the step uses it: a[Operand::dq]. A role that `op` does not
// have does not compile (OperandOf), and the step must have op's operands.
template <Op op, typename Bind>
class OperandsOf {
 public:
  OperandsOf(const Step& step, const Bind& bind) : step_(step), bind_(bind) {
    FPDT_ASSERT(signature(step.op) == signature(op));
  }
  float* operator[](OperandOf<op> name) const { return bind_(name.position); }
  Buf buffer(OperandOf<op> name) const { return step_.buffers[name.position]; }
  int position(OperandOf<op> name) const { return name.position; }

 private:
  const Step& step_;
  const Bind& bind_;
};

template <Op op, typename Bind>
OperandsOf<op, Bind> operands_of(const Step& step, const Bind& bind) {
  return OperandsOf<op, Bind>(step, bind);
}

}  // namespace

void FpdtModel::execute(const Step& step, const StepPlacements& placements, int layer,
                        kernels::CopyEvent before_program) {
  using enum Operand;
  // The operand at `position` as the step uses it: an overwritten one is bound to its placement or its
  // own slice.
  auto bind = [&](int position) {
    const Buf buffer = step.buffers[position];
    return operand_role(step, position) == Role::out ? out(buffer, placements[position], layer) : in(buffer);
  };
  const int B = batch_->B;
  const int64_t n = plan_.local_chunk_tokens * B;  // token rows of a chunk
  switch (step.op) {
    case Op::fetch:
    case Op::write: {
      const int slot_layer = step.layer == LayerRef::next_layer ? layer + 1 : layer;
      const size_t buffer = static_cast<size_t>(step.buffer(Operand::buffer));
      void* resident = store_->resident(step.array, slot_layer, step.chunk);
      const size_t offset = store_->offset(step.array, slot_layer, step.chunk), bytes = store_->slot_bytes(step.array);
      if (step.op == Op::fetch) {
        if (resident != nullptr) {  // read in place
          bound_[buffer] = resident;
          return;
        }
        bound_[buffer] = own_[buffer];
        events_[step.copy] = last_event_ = copies_->read(own_[buffer], store_->storage(), offset, bytes);
        traffic_.read_bytes += bytes;
      } else if (resident != nullptr) {
        if (resident != bound_[buffer]) memory_.copy(resident, bound_[buffer], bytes);
      } else {
        events_[step.copy] = last_event_ = copies_->write(store_->storage(), offset, bound_[buffer], bytes);
        traffic_.written_bytes += bytes;
      }
      return;
    }
    case Op::wait: copies_->wait(step.copy < 0 ? before_program : events_[step.copy]); return;
    case Op::segment:
      states_.after_segment(segment_++);
      states_.before_segment(segment_);
      bind_tensors();
      return;
    case Op::zero: {
      const auto a = operands_of<Op::zero>(step, bind);
      memory_.fill_zero(a[buffer], bytes_[static_cast<size_t>(a.buffer(buffer))]);
      return;
    }
    case Op::pack: {  // the buffer's fp32 lanes → its twin's bf16 (exact: the model rounded them, layer.h)
      const auto a = operands_of<Op::pack>(step, bind);
      const int64_t elements = static_cast<int64_t>(bytes_[static_cast<size_t>(a.buffer(from))] / sizeof(float));
      backend_.pack_bf16(reinterpret_cast<uint16_t*>(a[to]), a[from], elements);
      return;
    }
    case Op::unpack: {
      const auto a = operands_of<Op::unpack>(step, bind);
      const int64_t elements = static_cast<int64_t>(bytes_[static_cast<size_t>(a.buffer(to))] / sizeof(float));
      backend_.unpack_bf16(a[to], reinterpret_cast<const uint16_t*>(a[from]), elements);
      return;
    }
    case Op::inputs: upload_inputs(step.chunk, step.variant == Variant::with_targets); return;
    case Op::docs: upload_documents(step.chunk, operands_of<Op::docs>(step, bind).buffer(buffer)); return;
    case Op::q_to_heads:
    case Op::kv_to_heads:
    case Op::q_to_sequence:
    case Op::kv_grad_to_sequence: {
      const auto a = operands_of<Op::q_to_heads>(step, bind);  // the four have the same operands
      if (placements[a.position(to)].alias) {  // P = 1: the same layout, so the same memory
        bound_[static_cast<size_t>(a.buffer(to))] = bound_[static_cast<size_t>(a.buffer(from))];
      } else if (step.op == Op::q_to_heads) {
        exchange_->q_to_heads(a[from], a[to], B);
      } else if (step.op == Op::kv_to_heads) {
        exchange_->kv_to_heads(a[from], a[to], B);
      } else if (step.op == Op::q_to_sequence) {
        exchange_->q_to_sequence(a[from], a[to], B);
      } else {
        exchange_->kv_grad_to_sequence(a[from], a[to], B);
      }
      return;
    }
    default: break;
  }

  const trace::Span span(op_name(step.op), "compute");
  const model::AttentionInput norm{own<float>(Buf::norm), own<float>(Buf::norm_mean), own<float>(Buf::norm_rstd)};
  // The MLP's activations: the step's gate, up and act when they go through the store, else the chunk
  // buffers (recomputed in the backward).
  auto mlp = [&](const auto& a) {
    const bool stored = a.buffer(gate) != Buf::none;
    return model::MlpActivations{own<float>(Buf::mlp_norm), own<float>(Buf::mlp_mean), own<float>(Buf::mlp_rstd),
                                 stored ? a[gate] : own<float>(Buf::gate), stored ? a[up] : own<float>(Buf::up),
                                 stored ? a[act] : own<float>(Buf::act)};
  };
  const model::LayerScratch scratch{own<float>(Buf::d_norm), own<float>(Buf::d_act), own<float>(Buf::d_gate),
                                    own<float>(Buf::d_up)};
  const int32_t* tokens = own<int32_t>(Buf::tokens);
  const int32_t* position_ids = own<int32_t>(Buf::position_ids);
  const int64_t* positions = own<int64_t>(Buf::positions);
  switch (step.op) {
    case Op::embed: {
      const auto a = operands_of<Op::embed>(step, bind);
      math_.embedding_forward(global_weights_, tokens, position_ids, a[x], n);
      return;
    }
    case Op::attention_input: {
      const auto a = operands_of<Op::attention_input>(step, bind);
      math_.attention_input_forward(weights_, a[x], positions, n, norm, a[q], a[k], a[v]);
      return;
    }
    case Op::attention_block: {
      const auto a = operands_of<Op::attention_block>(step, bind);
      float* o_out = a[o];
      float* lse_out = a[lse];
      backend_.attention_chunk_forward(o_out, lse_out, block(layer, a[q], a[k], a[v], step.chunk, step.kv_chunk),
                                       step.variant == Variant::merge);
      // The diagonal block is the q chunk's last: o is final, and kept (rounded in bf16, layer.h).
      if (step.kv_chunk == step.chunk) math_.round_kept(o_out, n * config_.q_dim());
      return;
    }
    case Op::attention_output: {
      const auto a = operands_of<Op::attention_output>(step, bind);
      math_.attention_output_forward(weights_, a[o], a[x], a[x_mid], n);
      return;
    }
    case Op::mlp: {
      const auto a = operands_of<Op::mlp>(step, bind);
      math_.mlp_forward(weights_, a[x_mid], a[x_out], n, mlp(a));
      return;
    }
    case Op::head: {
      const auto a = operands_of<Op::head>(step, bind);
      const model::HeadScratch head{head_rows_, own<float>(Buf::logits), own<float>(Buf::losses),
                                    own<float>(Buf::logits_lse), own<double>(Buf::loss_sums)};
      const model::TokenResults per_token{outputs_.losses ? host_losses_.data() : nullptr,
                                          outputs_.predictions ? host_predictions_.data() : nullptr};
      const model::Targets targets{.ids = own<int32_t>(Buf::targets),
                                   .mask = batch_->loss_mask ? own<float>(Buf::loss_mask) : nullptr};
      std::optional<model::HeadBackward> backward;
      if (step.variant == Variant::with_backward)
        backward = model::HeadBackward{global_gradients_, grad_scale_, a[d_res], scratch.d_norm};
      math_.head_forward(global_weights_, a[x], n, targets, norm, head, backward, {.per_token = per_token});
      store_token_results(step.chunk);
      return;
    }
    case Op::mlp_backward: {
      const auto a = operands_of<Op::mlp_backward>(step, bind);
      const model::MlpActivations saved = mlp(a);
      if (step.variant == Variant::from_kept) {  // gate, up, act as kept: only the norm in front is recomputed
        math_.norm_forward(saved.norm, saved.mean, saved.rstd, a[x_mid], weights_.mlp_norm_weight,
                           weights_.mlp_norm_bias, n);
      } else {
        math_.mlp_forward(weights_, a[x_mid], a[x_out], n, saved);  // the MLP's activations, recomputed
      }
      math_.mlp_backward(weights_, gradients_, a[x_mid], n, saved, a[d_res], scratch);
      return;
    }
    case Op::attention_output_backward: {
      const auto a = operands_of<Op::attention_output_backward>(step, bind);
      math_.attention_output_backward(weights_, gradients_, a[o], a[d_res], a[d_attn], n);
      return;
    }
    case Op::attention_delta: {
      const auto a = operands_of<Op::attention_delta>(step, bind);
      backend_.attention_chunk_delta(a[delta], a[d_o], a[o], B, plan_.chunk_tokens, sharding_.local_q_heads,
                                     config_.head_dim);
      return;
    }
    case Op::attention_block_backward: {
      const auto a = operands_of<Op::attention_block_backward>(step, bind);
      backend_.attention_chunk_backward(a[dq], a[dk], a[dv], a[d_o], a[lse], a[delta],
                                        block(layer, a[q], a[k], a[v], step.chunk, step.kv_chunk));
      return;
    }
    case Op::attention_norm: {
      const auto a = operands_of<Op::attention_norm>(step, bind);
      math_.norm_forward(norm.norm, norm.mean, norm.rstd, a[x], weights_.attn_norm_weight, weights_.attn_norm_bias, n);
      return;
    }
    case Op::attention_input_backward: {
      const auto a = operands_of<Op::attention_input_backward>(step, bind);
      math_.attention_input_backward(weights_, gradients_, a[x], positions, n, norm, {a[dq], a[dk], a[dv]}, a[d_res],
                                     scratch);
      return;
    }
    case Op::embed_backward: {
      const auto a = operands_of<Op::embed_backward>(step, bind);
      math_.embedding_backward(global_gradients_, tokens, position_ids, a[d_res], n);
      return;
    }
    default: FPDT_ASSERT(false);
  }
}

// ---- per-chunk inputs -------------------------------------------------------------------------------

// Token ids, positions (and targets, mask) of local chunk `chunk` for each sequence, rows (b, t): the
// batch's positions when it has them, else the global ones; padding past S gets token 0, target
// kIgnoreIndex and its global position (learned positions: at most the last position id).
void FpdtModel::upload_inputs(int chunk, bool with_targets) {
  const model::Batch& batch = *batch_;
  const int64_t c = plan_.local_chunk_tokens, S = plan_.seq_tokens, begin = plan_.local_chunk_begin(chunk);
  const int64_t max_id = config_.learned_positions() ? config_.max_positions - 1 : INT32_MAX;
  for (int sequence = 0; sequence < batch.B; ++sequence)
    for (int64_t t = 0; t < c; ++t) {
      const size_t row = static_cast<size_t>(sequence * c + t);
      const int64_t position = begin + t, source = sequence * S + position;
      const bool real = position < S;
      host_tokens_[row] = real ? batch.tokens[source] : 0;
      host_positions_[row] = real && batch.positions ? batch.positions[source] : position;
      host_position_ids_[row] = static_cast<int32_t>(std::min(host_positions_[row], max_id));
      if (!with_targets) continue;
      host_targets_[row] = real && batch.targets ? batch.targets[source] : kernels::kIgnoreIndex;
      host_mask_[row] = real && batch.loss_mask ? batch.loss_mask[source] : 1.0f;
    }
  const size_t rows = static_cast<size_t>(batch.B * c);
  memory_.upload(own<int32_t>(Buf::tokens), host_tokens_.data(), rows * sizeof(int32_t));
  memory_.upload(own<int64_t>(Buf::positions), host_positions_.data(), rows * sizeof(int64_t));
  memory_.upload(own<int32_t>(Buf::position_ids), host_position_ids_.data(), rows * sizeof(int32_t));
  if (!with_targets) return;
  memory_.upload(own<int32_t>(Buf::targets), host_targets_.data(), rows * sizeof(int32_t));
  memory_.upload(own<float>(Buf::loss_mask), host_mask_.data(), rows * sizeof(float));
}

void FpdtModel::store_token_results(int chunk) {
  if (outputs_.losses == nullptr && outputs_.predictions == nullptr) return;
  const int64_t c = plan_.local_chunk_tokens, S = plan_.seq_tokens, begin = plan_.local_chunk_begin(chunk);
  const int64_t real = std::clamp<int64_t>(S - begin, 0, c);
  for (int sequence = 0; sequence < batch_->B; ++sequence) {
    const size_t row = static_cast<size_t>(sequence * c), at = static_cast<size_t>(sequence * S + begin);
    if (outputs_.losses) std::copy_n(host_losses_.begin() + row, real, outputs_.losses + at);
    if (outputs_.predictions) std::copy_n(host_predictions_.begin() + row, real, outputs_.predictions + at);
  }
}

// Document ids (B, C) of global chunk `chunk`, the rows of a head-sharded block.
void FpdtModel::upload_documents(int chunk, Buf buffer) {
  const model::Batch& batch = *batch_;
  const int64_t C = plan_.chunk_tokens, S = plan_.seq_tokens, begin = plan_.chunk_begin(chunk);
  for (int sequence = 0; sequence < batch.B; ++sequence)
    for (int64_t t = 0; t < C; ++t) {
      const int64_t position = begin + t;
      host_docs_[static_cast<size_t>(sequence * C + t)] =
          position < S ? batch.doc_ids[sequence * S + position] : kPaddingDocument;
    }
  memory_.upload(own<int32_t>(buffer), host_docs_.data(), static_cast<size_t>(batch.B * C) * sizeof(int32_t));
}

kernels::AttentionChunkParams FpdtModel::block(int layer, const float* q, const float* k, const float* v,
                                               int q_chunk, int kv_chunk) const {
  kernels::AttentionChunkParams params;
  params.q = q;
  params.k = k;
  params.v = v;
  if (documents_) {
    params.q_doc_ids = own<int32_t>(Buf::q_docs);
    params.kv_doc_ids = own<int32_t>(Buf::kv_docs);
  }
  params.B = batch_->B;
  params.Cq = plan_.chunk_tokens;
  params.Ck = plan_.chunk_tokens;
  params.H = sharding_.local_q_heads;
  params.Hkv = sharding_.local_kv_heads;
  params.D = config_.head_dim;
  params.q_begin = plan_.chunk_begin(q_chunk);
  params.kv_begin = plan_.chunk_begin(kv_chunk);
  params.scale = config_.attention_scale(layer);
  params.window = config_.window(layer);  // the window its block mask was made with (schedule_for)
  params.precision = run_.precision;
  return params;
}

model::LossStats FpdtModel::forward_backward(const model::Batch& batch, double grad_scale, const TokenOutputs& outputs) {
  FPDT_CHECK(batch.targets != nullptr, "pipeline", "forward_backward needs targets", "");
  return run(batch, Pass::forward_backward, grad_scale, outputs);
}

model::LossStats FpdtModel::forward(const model::Batch& batch, const TokenOutputs& outputs) {
  return run(batch, Pass::forward, 0.0, outputs);
}

}  // namespace fpdt::pipeline

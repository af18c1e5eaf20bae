// The FPDT chunk pipeline (see fpdt_model.h). Each layer's forward and backward sit side by side;
// the store helpers at the top are the only place that knows whether a chunk is resident.
#include "fpdt/pipeline/fpdt_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fpdt/base/error.h"
#include "fpdt/base/trace.h"

namespace fpdt::pipeline {

namespace {
constexpr size_t kLogitsChunkBytes = 32u << 20;  // the LM head never holds more logits than this
}  // namespace

Recompute parse_recompute(const std::string& text) {
  if (text == "none") return Recompute::none;
  if (text == "layer") return Recompute::layer;
  throw Error("pipeline", "unknown recompute mode '" + text + "'", "use --recompute none or --recompute layer");
}

// Compute-tier buffers of one chunk (c local tokens, C = P·c global), allocated once per S.
// Every buffer that takes part in offload transfers has chunk_buffer_bytes() capacity.
struct FpdtModel::ChunkBuffers {
  Arena arena;
  // Per-chunk inputs.
  int32_t* tokens;        // (c)
  int32_t* targets;       // (c)
  float* mask;            // (c) or unused
  int64_t* positions;     // (c) global positions (RoPE)
  int32_t* position_ids;  // (c) learned position ids, clamped for padding
  // Forward.
  float* x;               // (c, h) staging of a layer input
  float* x_mid;           // (c, h)
  float* x_out;           // (c, h)
  model::AttentionInput norm;  // (c, h), (c), (c)
  float* q_local;         // (c, Hq·D)
  float* k_local;         // (c, Hkv·D)
  float* v_local;         // (c, Hkv·D)
  float* q_head;          // (C, Hq/P, D)
  float* k_head;          // (C, Hkv/P, D)
  float* v_head;          // (C, Hkv/P, D)
  float* k_stage[2];      // (C, Hkv/P, D) prefetched kv chunks
  float* v_stage[2];
  float* o_head;          // (C, Hq/P, D)
  float* lse;             // (Hq/P, C)
  float* o_local;         // (c, Hq·D)
  model::MlpActivations mlp;  // (c, h), (c), (c), (c, f) × 3
  float* pack;            // (c, max(Hq, kv send heads), D) all-to-all packing
  model::HeadScratch head;
  // Backward.
  float* d_res;           // (c, h)
  float* d_attn;          // (c, Hq·D)
  float* d_o_head;        // (C, Hq/P, D)
  float* delta;           // (Hq/P, C)
  float* d_k;             // (C, Hkv/P, D) accumulators of the outer kv chunk
  float* d_v;
  float* q_stage[2];      // (C, Hq/P, D) the inner q set, double-buffered
  float* do_stage[2];
  float* lse_stage[2];    // (Hq/P, C)
  float* delta_stage[2];
  float* dq_stage[2];
  float* dq_first;        // (C, Hq/P, D) dQ of the diagonal block, final after it
  float* dq_local;        // (c, Hq·D)
  float* dk_local;        // (c, Hkv·D)
  float* dv_local;
  model::LayerScratch scratch;  // (c, h), (c, f) × 3
};

FpdtModel::FpdtModel(const model::ModelConfig& config, kernels::Backend& backend, comm::Communicator& sp,
                     const PipelineConfig& pipeline, uint64_t seed)
    : config_(config),
      backend_(backend),
      sp_(sp),
      pipeline_(pipeline),
      layout_((config.validate(), config)),
      params_(layout_, "model parameters"),
      grads_(layout_, "parameter gradients"),
      math_(config_, backend_),
      sharding_(make_head_sharding(config.heads, config.kv_heads, sp.size())) {
  model::init_parameters(config_, layout_, params_, seed);
}

FpdtModel::~FpdtModel() {
  // Drain the copy thread before the buffers its queued copies read from are freed (members are
  // destroyed in reverse order, buffers before the engine). Never throws.
  copies_.reset();
}

void FpdtModel::reserve(int64_t seq_tokens, bool dry) {
  if (buffers_ && plan_.seq_tokens == seq_tokens && dry_ == dry) return;
  if (copies_) copies_.reset();  // waits for (and forgets) the copies of the old layout
  buffers_.reset();
  exchange_.reset();
  store_.reset();
  pending_writes_.clear();
  plan_ = make_chunk_plan(seq_tokens, sp_.size(), sp_.rank(), pipeline_.chunk_tokens,
                          pipeline_.chunk_tokens > 0 ? 0 : pipeline_.chunks);
  if (config_.learned_positions() && seq_tokens > config_.max_positions)
    throw Error("pipeline",
                "sequence of " + std::to_string(seq_tokens) + " tokens exceeds the " +
                    std::to_string(config_.max_positions) + " learned positions of model '" + config_.name + "'",
                "lower --seq or use a RoPE (Llama) model");

  const int64_t c = plan_.local_chunk_tokens, C = plan_.chunk_tokens, u = plan_.chunks;
  const int64_t h = config_.hidden, f = config_.ffn_hidden, q = config_.q_dim(), kv = config_.kv_dim();
  const int64_t D = config_.head_dim, V = config_.vocab_size;
  const int64_t qh = C * sharding_.local_q_heads * D;    // floats of a head-sharded q chunk = c·Hq·D
  const int64_t kvh = C * sharding_.local_kv_heads * D;  // floats of a head-sharded k chunk
  const int64_t lse_floats = sharding_.local_q_heads * C;
  const int64_t stored = pipeline_.recompute == Recompute::layer ? 1 : config_.layers;

  store_ = std::make_unique<OffloadStore>(pipeline_.offload);
  arrays_.x = store_->add_array("x", (config_.layers + 1) * u, c * h);
  arrays_.x_mid = store_->add_array("x_mid", stored * u, c * h);
  arrays_.q = store_->add_array("q", stored * u, qh);
  arrays_.k = store_->add_array("k", stored * u, kvh);
  arrays_.v = store_->add_array("v", stored * u, kvh);
  arrays_.o = store_->add_array("o", stored * u, qh);
  arrays_.o_local = store_->add_array("o_local", stored * u, c * q);
  arrays_.lse = store_->add_array("lse", stored * u, lse_floats);
  arrays_.d_res = store_->add_array("d_res", u, c * h);
  arrays_.d_o = store_->add_array("d_o", u, qh);
  arrays_.delta = store_->add_array("delta", u, lse_floats);
  arrays_.d_q = store_->add_array("d_q", u, qh);
  store_->allocate(dry);
  dry_ = dry;
  if (!copies_) copies_ = std::make_unique<CopyEngine>();

  // Compute-tier chunk buffers: one arena, every slice a multiple of the transfer block.
  const int64_t head_tokens = std::clamp<int64_t>(static_cast<int64_t>(kLogitsChunkBytes / (4 * V)), 1, c);
  const int64_t pack_floats = c * std::max<int64_t>(config_.heads, sharding_.kv_send_heads()) * D;
  const int64_t ch = c * h, cf = c * f, cq = c * q, ckv = c * kv;
  // One description of the layout, run twice: to add up the arena's size, then to hand out slices.
  auto lay_out = [&](ChunkBuffers& b, auto&& take_bytes) {
    auto take = [&](int64_t floats) { return static_cast<float*>(take_bytes(floats * sizeof(float))); };
    b.tokens = static_cast<int32_t*>(take_bytes(c * 4));
    b.targets = static_cast<int32_t*>(take_bytes(c * 4));
    b.positions = static_cast<int64_t*>(take_bytes(c * 8));
    b.position_ids = static_cast<int32_t*>(take_bytes(c * 4));
    b.mask = static_cast<float*>(take_bytes(c * 4));
    b.x = take(ch);
    b.x_mid = take(ch);
    b.x_out = take(ch);
    b.norm = model::AttentionInput{take(ch), take(c), take(c)};
    b.q_local = take(cq);
    b.k_local = take(ckv);
    b.v_local = take(ckv);
    b.q_head = take(qh);
    b.k_head = take(kvh);
    b.v_head = take(kvh);
    b.k_stage[0] = take(kvh);
    b.k_stage[1] = take(kvh);
    b.v_stage[0] = take(kvh);
    b.v_stage[1] = take(kvh);
    b.o_head = take(qh);
    b.lse = take(lse_floats);
    b.o_local = take(cq);
    b.mlp = model::MlpActivations{take(ch), take(c), take(c), take(cf), take(cf), take(cf)};
    b.pack = take(pack_floats);
    b.head = model::HeadScratch{head_tokens, take(head_tokens * V), take(head_tokens), take(head_tokens)};
    b.d_res = take(ch);
    b.d_attn = take(cq);
    b.d_o_head = take(qh);
    b.delta = take(lse_floats);
    b.d_k = take(kvh);
    b.d_v = take(kvh);
    b.q_stage[0] = take(qh);
    b.q_stage[1] = take(qh);
    b.do_stage[0] = take(qh);
    b.do_stage[1] = take(qh);
    b.lse_stage[0] = take(lse_floats);
    b.lse_stage[1] = take(lse_floats);
    b.delta_stage[0] = take(lse_floats);
    b.delta_stage[1] = take(lse_floats);
    b.dq_stage[0] = take(qh);
    b.dq_stage[1] = take(qh);
    b.dq_first = take(qh);
    b.dq_local = take(cq);
    b.dk_local = take(ckv);
    b.dv_local = take(ckv);
    b.scratch = model::LayerScratch{take(ch), take(cf), take(cf), take(cf)};
  };
  size_t total = 0;
  ChunkBuffers sizing;
  lay_out(sizing, [&](int64_t bytes) -> void* {
    total += chunk_buffer_bytes(static_cast<size_t>(bytes));
    return nullptr;
  });
  auto b = std::make_unique<ChunkBuffers>();
  b->arena = Arena(Tier::compute, total, "FPDT chunk buffers (" + std::to_string(c) + " local tokens per chunk)");
  lay_out(*b, [&](int64_t bytes) { return b->arena.take(chunk_buffer_bytes(static_cast<size_t>(bytes))); });
  buffers_ = std::move(b);
  exchange_ = std::make_unique<UlyssesExchange>(sp_, sharding_, config_.head_dim, buffers_->pack);
}

// ---- store access ---------------------------------------------------------------------------------

const float* FpdtModel::read(int array, int64_t slot, float* staging) {
  return ready(array, slot, staging, prefetch(array, slot, staging));
}

CopyEngine::Event FpdtModel::prefetch(int array, int64_t slot, float* staging) {
  if (store_->resident()) return 0;
  writable(staging);  // a pending write may still be reading it
  OffloadStore* store = store_.get();
  return copies_->submit([store, array, slot, staging] {
    const trace::Span span("fetch chunk", "copy");
    store->read(array, slot, staging);
  });
}

const float* FpdtModel::ready(int array, int64_t slot, float* staging, CopyEngine::Event event) {
  if (store_->resident()) return store_->resident(array, slot);
  copies_->wait(event);
  return staging;
}

void FpdtModel::write(int array, int64_t slot, const float* src) {
  if (store_->resident()) {
    float* target = store_->resident(array, slot);
    if (target != src) std::memcpy(target, src, sizeof(float) * static_cast<size_t>(store_->slot_floats(array)));
    return;
  }
  OffloadStore* store = store_.get();
  const CopyEngine::Event event = copies_->submit([store, array, slot, src] {
    const trace::Span span("offload chunk", "copy");
    store->write(array, slot, src);
  });
  pending_writes_.emplace_back(src, event);
}

float* FpdtModel::writable(float* buffer) {
  CopyEngine::Event last = 0;
  for (const auto& [source, event] : pending_writes_)
    if (source == buffer) last = std::max(last, event);
  if (last == 0) return buffer;
  copies_->wait(last);  // FIFO: everything submitted before `last` is done too
  std::erase_if(pending_writes_, [last](const auto& entry) { return entry.second <= last; });
  return buffer;
}

// ---- per-chunk inputs -------------------------------------------------------------------------------

namespace {
// Fills the chunk's token ids, targets, mask and positions from the full sequence; padding past S gets
// token 0, target kIgnoreIndex and (learned positions) the last position id.
void fill_chunk(const model::ModelConfig& config, const ChunkPlan& plan, int chunk, const int32_t* tokens,
                const int32_t* targets, const float* mask, int32_t* chunk_tokens, int32_t* chunk_targets,
                float* chunk_mask, int64_t* positions, int32_t* position_ids) {
  const int64_t begin = plan.local_chunk_begin(chunk);
  const int64_t max_id = config.learned_positions() ? config.max_positions - 1 : INT32_MAX;
  for (int64_t t = 0; t < plan.local_chunk_tokens; ++t) {
    const int64_t position = begin + t;
    const bool real = position < plan.seq_tokens;
    chunk_tokens[t] = real ? tokens[position] : 0;
    if (chunk_targets) chunk_targets[t] = real && targets ? targets[position] : kernels::kIgnoreIndex;
    if (chunk_mask) chunk_mask[t] = real && mask ? mask[position] : 1.0f;
    positions[t] = position;
    position_ids[t] = static_cast<int32_t>(std::min<int64_t>(position, max_id));
  }
}
}  // namespace

kernels::AttentionChunkParams FpdtModel::block(int layer, const float* q, const float* k, const float* v,
                                               int q_chunk, int kv_chunk) const {
  kernels::AttentionChunkParams params;
  params.q = q;
  params.k = k;
  params.v = v;
  params.B = 1;
  params.Cq = plan_.chunk_tokens;
  params.Ck = plan_.chunk_tokens;
  params.H = sharding_.local_q_heads;
  params.Hkv = sharding_.local_kv_heads;
  params.D = config_.head_dim;
  params.q_begin = plan_.chunk_begin(q_chunk);
  params.kv_begin = plan_.chunk_begin(kv_chunk);
  params.scale = config_.attention_scale(layer);
  params.window = config_.window(layer);
  return params;
}

// ---- one layer, forward and backward ---------------------------------------------------------------

void FpdtModel::layer_forward(int layer, bool write_output) {
  ChunkBuffers& b = *buffers_;
  const model::LayerTensors w = model::layer_tensors(layout_, params_, layer);
  const int64_t c = plan_.local_chunk_tokens;
  const int sl = stored_layer(layer);
  for (int i = 0; i < plan_.chunks; ++i) {
    fill_chunk(config_, plan_, i, current_tokens_, nullptr, nullptr, b.tokens, nullptr, nullptr, b.positions,
               b.position_ids);
    const float* x = read(arrays_.x, slot(layer, i), b.x);
    {
      const trace::Span span("norm + qkv + rope", "compute");
      math_.attention_input_forward(w, x, b.positions, c, b.norm, b.q_local, b.k_local, b.v_local);
    }
    exchange_->q_to_heads(b.q_local, writable(b.q_head), c);
    exchange_->kv_to_heads(b.k_local, writable(b.k_head), c);
    exchange_->kv_to_heads(b.v_local, writable(b.v_head), c);
    write(arrays_.k, slot(sl, i), b.k_head);
    write(arrays_.v, slot(sl, i), b.v_head);

    // q_i over kv chunks 0..i, merged by LSE in order; kv j + 1 is fetched while block (i, j) computes.
    float* o_head = writable(b.o_head);
    float* lse = writable(b.lse);
    CopyEngine::Event k_event[2] = {0, 0}, v_event[2] = {0, 0};
    if (i > 0) {
      k_event[0] = prefetch(arrays_.k, slot(sl, 0), b.k_stage[0]);
      v_event[0] = prefetch(arrays_.v, slot(sl, 0), b.v_stage[0]);
    }
    for (int j = 0; j <= i; ++j) {
      const int stage = j % 2;
      const float* k = j == i ? b.k_head : ready(arrays_.k, slot(sl, j), b.k_stage[stage], k_event[stage]);
      const float* v = j == i ? b.v_head : ready(arrays_.v, slot(sl, j), b.v_stage[stage], v_event[stage]);
      if (j + 1 < i) {
        k_event[1 - stage] = prefetch(arrays_.k, slot(sl, j + 1), b.k_stage[1 - stage]);
        v_event[1 - stage] = prefetch(arrays_.v, slot(sl, j + 1), b.v_stage[1 - stage]);
      }
      const trace::Span span("attention block forward", "compute");
      backend_.attention_chunk_forward(o_head, lse, block(layer, b.q_head, k, v, i, j), j > 0);
    }
    write(arrays_.q, slot(sl, i), b.q_head);
    write(arrays_.o, slot(sl, i), o_head);
    write(arrays_.lse, slot(sl, i), lse);

    exchange_->q_to_sequence(o_head, writable(b.o_local), c);
    write(arrays_.o_local, slot(sl, i), b.o_local);
    {
      const trace::Span span("out proj + mlp", "compute");
      math_.attention_output_forward(w, b.o_local, x, writable(b.x_mid), c);
      write(arrays_.x_mid, slot(sl, i), b.x_mid);
      math_.mlp_forward(w, b.x_mid, writable(b.x_out), c, b.mlp);
    }
    if (write_output) write(arrays_.x, slot(layer + 1, i), b.x_out);
  }
}

// On entry d_res holds dL/dx_out of the layer for every chunk; on exit dL/dx_in.
void FpdtModel::layer_backward(int layer) {
  ChunkBuffers& b = *buffers_;
  const model::LayerTensors w = model::layer_tensors(layout_, params_, layer);
  const model::LayerTensors g = model::layer_tensors(layout_, grads_, layer);
  const int64_t c = plan_.local_chunk_tokens, C = plan_.chunk_tokens;
  const int u = plan_.chunks, sl = stored_layer(layer);
  const size_t q_bytes = sizeof(float) * static_cast<size_t>(store_->slot_floats(arrays_.d_q));
  const size_t kv_bytes = sizeof(float) * static_cast<size_t>(store_->slot_floats(arrays_.k));
  if (pipeline_.recompute == Recompute::layer) layer_forward(layer, false);

  // Phase A, per chunk: MLP and output projection backward; dO to head-sharded; Δ; dQ zeroed.
  for (int i = 0; i < u; ++i) {
    float* d_res = const_cast<float*>(read(arrays_.d_res, i, b.d_res));
    const float* x_mid = read(arrays_.x_mid, slot(sl, i), b.x_mid);
    {
      const trace::Span span("mlp backward", "compute");
      math_.mlp_forward(w, x_mid, writable(b.x_out), c, b.mlp);  // the MLP's activations, recomputed
      math_.mlp_backward(w, g, x_mid, c, b.mlp, d_res, b.scratch);
    }
    const float* o_local = read(arrays_.o_local, slot(sl, i), b.o_local);
    math_.attention_output_backward(w, g, o_local, d_res, b.d_attn, c);
    write(arrays_.d_res, i, d_res);
    exchange_->q_to_heads(b.d_attn, writable(b.d_o_head), c);
    write(arrays_.d_o, i, b.d_o_head);
    const float* o_head = read(arrays_.o, slot(sl, i), b.o_head);
    backend_.attention_chunk_delta(writable(b.delta), b.d_o_head, o_head, 1, C, sharding_.local_q_heads,
                                   config_.head_dim);
    write(arrays_.delta, i, b.delta);
    std::memset(writable(b.dq_first), 0, q_bytes);
    write(arrays_.d_q, i, b.dq_first);
  }

  // Phase B, the paper's order: outer kv chunk i, inner q chunks j ≥ i (the q set of j + 1 prefetched).
  for (int i = 0; i < u; ++i) {
    const float* k = read(arrays_.k, slot(sl, i), b.k_stage[0]);
    const float* v = read(arrays_.v, slot(sl, i), b.v_stage[0]);
    std::memset(b.d_k, 0, kv_bytes);
    std::memset(b.d_v, 0, kv_bytes);
    struct QSet {
      CopyEngine::Event q, d_o, lse, delta, d_q;
    };
    auto fetch_qset = [&](int j, int stage) {
      float* d_q = j == i ? b.dq_first : b.dq_stage[stage];
      return QSet{prefetch(arrays_.q, slot(sl, j), b.q_stage[stage]), prefetch(arrays_.d_o, j, b.do_stage[stage]),
                  prefetch(arrays_.lse, slot(sl, j), b.lse_stage[stage]),
                  prefetch(arrays_.delta, j, b.delta_stage[stage]), prefetch(arrays_.d_q, j, d_q)};
    };
    QSet pending[2];
    pending[i % 2] = fetch_qset(i, i % 2);
    float* dq_i = nullptr;
    for (int j = i; j < u; ++j) {
      const int stage = j % 2;
      const QSet events = pending[stage];
      const float* q = ready(arrays_.q, slot(sl, j), b.q_stage[stage], events.q);
      const float* d_o = ready(arrays_.d_o, j, b.do_stage[stage], events.d_o);
      const float* lse = ready(arrays_.lse, slot(sl, j), b.lse_stage[stage], events.lse);
      const float* delta = ready(arrays_.delta, j, b.delta_stage[stage], events.delta);
      float* d_q = const_cast<float*>(ready(arrays_.d_q, j, j == i ? b.dq_first : b.dq_stage[stage], events.d_q));
      if (j + 1 < u) pending[1 - stage] = fetch_qset(j + 1, 1 - stage);
      {
        const trace::Span span("attention block backward", "compute");
        backend_.attention_chunk_backward(d_q, b.d_k, b.d_v, d_o, lse, delta, block(layer, q, k, v, j, i));
      }
      if (j == i)
        dq_i = d_q;  // final: kv chunks 0..i have all contributed
      else
        write(arrays_.d_q, j, d_q);
    }

    // Chunk i's q, k, v gradients are final: back to sequence-sharded, then the QKV projection.
    exchange_->q_to_sequence(dq_i, b.dq_local, c);
    exchange_->kv_grad_to_sequence(b.d_k, b.dk_local, c);
    exchange_->kv_grad_to_sequence(b.d_v, b.dv_local, c);
    fill_chunk(config_, plan_, i, current_tokens_, nullptr, nullptr, b.tokens, nullptr, nullptr, b.positions,
               b.position_ids);
    const float* x = read(arrays_.x, slot(layer, i), b.x);
    math_.norm_forward(b.norm.norm, b.norm.mean, b.norm.rstd, x, w.attn_norm_weight, w.attn_norm_bias, c);
    float* d_res = const_cast<float*>(read(arrays_.d_res, i, b.d_res));
    {
      const trace::Span span("qkv backward", "compute");
      math_.attention_input_backward(w, g, x, b.positions, c, b.norm, b.dq_local, b.dk_local, b.dv_local, d_res,
                                     b.scratch);
    }
    write(arrays_.d_res, i, d_res);
  }
}

// ---- the whole model ---------------------------------------------------------------------------------

model::LossStats FpdtModel::run(const model::Batch& batch, bool backward, double grad_scale) {
  model::check_batch(config_, batch);
  reserve(batch.T);
  ChunkBuffers& b = *buffers_;
  const int64_t c = plan_.local_chunk_tokens;
  model::LossStats total;
  for (int sequence = 0; sequence < batch.B; ++sequence) {
    current_tokens_ = batch.tokens + sequence * batch.T;
    const int32_t* targets = batch.targets ? batch.targets + sequence * batch.T : nullptr;
    const float* mask = batch.loss_mask ? batch.loss_mask + sequence * batch.T : nullptr;

    for (int i = 0; i < plan_.chunks; ++i) {
      fill_chunk(config_, plan_, i, current_tokens_, nullptr, nullptr, b.tokens, nullptr, nullptr, b.positions,
                 b.position_ids);
      math_.embedding_forward(params_, b.tokens, b.position_ids, writable(b.x_out), c);
      write(arrays_.x, slot(0, i), b.x_out);
    }
    for (int layer = 0; layer < config_.layers; ++layer) layer_forward(layer, true);

    for (int i = 0; i < plan_.chunks && targets != nullptr; ++i) {
      fill_chunk(config_, plan_, i, current_tokens_, targets, mask, b.tokens, b.targets, b.mask, b.positions,
                 b.position_ids);
      const float* x = read(arrays_.x, slot(config_.layers, i), b.x);
      float* d_res = backward ? writable(b.d_res) : nullptr;
      if (backward) std::memset(d_res, 0, sizeof(float) * static_cast<size_t>(c) * config_.hidden);
      const model::LossStats stats =
          math_.head_forward(layout_, params_, backward ? &grads_ : nullptr, x, b.targets, mask ? b.mask : nullptr, c,
                             grad_scale, b.norm, b.head, nullptr, d_res, b.scratch.d_norm);
      total.loss_sum += stats.loss_sum;
      total.count += stats.count;
      if (backward) write(arrays_.d_res, i, d_res);
    }
    if (!backward) continue;

    for (int layer = config_.layers - 1; layer >= 0; --layer) layer_backward(layer);
    for (int i = 0; i < plan_.chunks; ++i) {
      fill_chunk(config_, plan_, i, current_tokens_, nullptr, nullptr, b.tokens, nullptr, nullptr, b.positions,
                 b.position_ids);
      const float* d_res = read(arrays_.d_res, i, b.d_res);
      math_.embedding_backward(grads_, b.tokens, b.position_ids, d_res, c);
    }
  }
  copies_->wait_all();
  pending_writes_.clear();
  return total;
}

model::LossStats FpdtModel::forward_backward(const model::Batch& batch, double grad_scale) {
  FPDT_CHECK(batch.targets != nullptr, "pipeline", "forward_backward needs targets", "");
  return run(batch, true, grad_scale);
}

model::LossStats FpdtModel::forward(const model::Batch& batch) { return run(batch, false, 0.0); }

}  // namespace fpdt::pipeline

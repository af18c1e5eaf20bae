// The whole model on one rank (see transformer.h): the layer maths of layer.h around whole-sequence
// attention, each layer's forward and backward side by side.
#include "fpdt/model/transformer.h"

#include <algorithm>
#include <cstring>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"

namespace fpdt::model {

namespace {
constexpr size_t kLogitsChunkBytes = 32u << 20;  // the LM head never holds more logits than this

// Token rows of one LM-head pass over N tokens: as many as kLogitsChunkBytes of fp32 logits hold.
int64_t head_tokens_for(int64_t vocab_size, int64_t N) {
  return std::clamp<int64_t>(static_cast<int64_t>(kLogitsChunkBytes / (4 * vocab_size)), 1, N);
}
}  // namespace

void check_batch(const ModelConfig& config, const Batch& batch) {
  FPDT_CHECK(batch.B > 0 && batch.T > 0, "model",
             "empty batch (" + std::to_string(batch.B) + " x " + std::to_string(batch.T) + " tokens)", "");
  if (config.learned_positions() && batch.T > config.max_positions)
    throw Error("model",
                "sequence of " + std::to_string(batch.T) + " tokens exceeds the " +
                    std::to_string(config.max_positions) + " learned positions of model '" + config.name + "'",
                "lower --seq or use a RoPE (Llama) model");
  const int64_t N = int64_t{batch.B} * batch.T;
  auto where = [&](int64_t n) {
    return " at sequence " + std::to_string(n / batch.T) + " position " + std::to_string(n % batch.T) +
           " is outside the vocabulary of " + std::to_string(config.vocab_size);
  };
  for (int64_t n = 0; n < N; ++n) {
    const int32_t token = batch.tokens[n];
    if (token < 0 || token >= config.vocab_size)
      throw Error("model", "token id " + std::to_string(token) + where(n),
                  "the data was tokenized for another vocabulary");
    if (batch.positions != nullptr) {
      const int32_t position = batch.positions[n];
      if (position < 0 || (config.learned_positions() && position >= config.max_positions))
        throw Error("model",
                    "position " + std::to_string(position) + " at sequence " + std::to_string(n / batch.T) +
                        " token " + std::to_string(n % batch.T) + " is outside the " +
                        (config.learned_positions() ? std::to_string(config.max_positions) + " learned positions"
                                                    : std::string("non-negative positions")) +
                        " of model '" + config.name + "'");
    }
    if (batch.targets == nullptr) continue;
    const int32_t target = batch.targets[n];
    if (target != kernels::kIgnoreIndex && (target < 0 || target >= config.vocab_size))
      throw Error("model", "target id " + std::to_string(target) + where(n));
  }
}

Transformer::Transformer(const ModelConfig& config, kernels::Backend& backend, uint64_t seed,
                         kernels::Precision precision)
    : config_(config),
      backend_(backend),
      layout_((config.validate(), config)),
      params_(layout_, "model parameters"),
      grads_(layout_, "parameter gradients"),
      math_(config_, backend_, precision) {
  init_parameters(config_, layout_, params_, seed);
}

std::optional<size_t> Transformer::activation_bytes(const ModelConfig& config, int B, int64_t T) {
  int64_t N = 0;
  if (B <= 0 || T <= 0 || !checked_mul(N, int64_t{B}, T)) return std::nullopt;
  const int64_t h = config.hidden, f = config.ffn_hidden, q = config.q_dim(), kv = config.kv_dim();
  const int64_t V = config.vocab_size, L = config.layers;
  const int64_t head_tokens = head_tokens_for(V, N);
  size_t total = 0;
  bool fits = true;
  // `copies` buffers of rows × width floats, each 64-byte aligned.
  const auto add = [&](int64_t copies, int64_t rows, int64_t width) {
    size_t count = 0, bytes = 0, all = 0;
    fits = fits && checked_mul(count, static_cast<size_t>(rows), static_cast<size_t>(width)) &&
           checked_mul(bytes, count, sizeof(float)) && bytes <= SIZE_MAX - 63 &&
           checked_mul(all, align_up(bytes), static_cast<size_t>(copies)) && checked_add(total, total, all);
  };
  const int64_t norms = 2 * L + 1;  // each layer's two, and the final one: (N, h) + mean and rstd (N)
  add(L + 1, N, h);                 // residual stream
  add(norms, N, h);
  add(2 * norms, N, 1);
  add(L, N, h);                     // x_mid
  add(2 * L, N, q);                 // q, attn
  add(2 * L, N, kv);                // k, v
  add(L, int64_t{B} * config.heads, T);  // lse
  add((config.family == Family::llama ? 3 : 2) * L, N, f);  // the MLP's
  add(1, head_tokens, V);           // a chunk of logits
  add(2, head_tokens, 1);
  add(2, N, h);                     // backward scratch
  add(2, N, q);
  add(2, N, kv);
  add(3, N, f);
  if (!fits) return std::nullopt;
  return total;
}

void Transformer::reserve(int B, int64_t T) {
  if (B == B_ && T == T_) return;
  const std::optional<size_t> total = activation_bytes(config_, B, T);
  if (!total)
    throw Error("model", std::to_string(B) + " x " + std::to_string(T) + " tokens: the activations would take more bytes than 64-bit sizes count",
                "lower the sequence length");
  const int64_t N = int64_t{B} * T;
  const int64_t h = config_.hidden, f = config_.ffn_hidden, q = config_.q_dim(), kv = config_.kv_dim();
  const int64_t V = config_.vocab_size, L = config_.layers;
  const int64_t head_tokens = head_tokens_for(V, N);
  const bool llama = config_.family == Family::llama;

  arena_ = Arena();  // release the old arena before taking a new one, so the peak does not double
  arena_ = Arena(Tier::compute, *total, "activations for " + std::to_string(B) + " x " + std::to_string(T) + " tokens");
  B_ = B;
  T_ = T;

  auto norm_slot = [&]() {
    return AttentionInput{arena_.take<float>(N * h), arena_.take<float>(N), arena_.take<float>(N)};
  };
  residual_.assign(static_cast<size_t>(L + 1), nullptr);
  for (auto& stream : residual_) stream = arena_.take<float>(N * h);
  layers_.assign(static_cast<size_t>(L), {});
  for (auto& acts : layers_) {
    acts.input = norm_slot();
    acts.q = arena_.take<float>(N * q);
    acts.k = arena_.take<float>(N * kv);
    acts.v = arena_.take<float>(N * kv);
    acts.attn = arena_.take<float>(N * q);
    acts.lse = arena_.take<float>(int64_t{B} * config_.heads * T);
    acts.x_mid = arena_.take<float>(N * h);
    const AttentionInput mlp_norm = norm_slot();
    acts.mlp = MlpActivations{mlp_norm.norm,
                              mlp_norm.mean,
                              mlp_norm.rstd,
                              arena_.take<float>(N * f),
                              llama ? arena_.take<float>(N * f) : nullptr,
                              arena_.take<float>(N * f)};
  }
  final_norm_ = norm_slot();
  head_ = HeadScratch{head_tokens, arena_.take<float>(head_tokens * V), arena_.take<float>(head_tokens),
                      arena_.take<float>(head_tokens), nullptr};
  d_resid_ = arena_.take<float>(N * h);
  d_q_ = arena_.take<float>(N * q);
  d_k_ = arena_.take<float>(N * kv);
  d_v_ = arena_.take<float>(N * kv);
  d_attn_ = arena_.take<float>(N * q);
  scratch_ = LayerScratch{arena_.take<float>(N * h), arena_.take<float>(N * f), arena_.take<float>(N * f),
                          arena_.take<float>(N * f)};

  positions_.resize(static_cast<size_t>(N));
  position_ids_.resize(static_cast<size_t>(N));
}

kernels::AttentionParams Transformer::attention_params(int layer) const {
  const LayerActivations& a = layers_[layer];
  kernels::AttentionParams p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.doc_ids = doc_ids_;
  p.B = B_;
  p.S = T_;  // each sequence is here whole
  p.H = config_.heads;
  p.Hkv = config_.kv_heads;
  p.D = config_.head_dim;
  p.scale = config_.attention_scale(layer);
  p.window = config_.window(layer);
  p.precision = math_.precision();
  return p;
}

void Transformer::layer_forward(int layer) {
  LayerActivations& a = layers_[layer];
  const LayerTensors w = layer_tensors(layout_, params_, layer);
  const int64_t N = int64_t{B_} * T_;
  math_.attention_input_forward(w, residual_[layer], positions_.data(), N, a.input, a.q, a.k, a.v);
  backend_.attention_forward(a.attn, a.lse, attention_params(layer));
  math_.round_kept(a.attn, N * config_.q_dim());
  math_.attention_output_forward(w, a.attn, residual_[layer], a.x_mid, N);
  math_.mlp_forward(w, a.x_mid, residual_[layer + 1], N, a.mlp);
}

void Transformer::layer_backward(int layer) {
  LayerActivations& a = layers_[layer];
  const LayerTensors w = layer_tensors(layout_, params_, layer);
  const LayerTensors g = layer_tensors(layout_, grads_, layer);
  const int64_t N = int64_t{B_} * T_;
  math_.mlp_backward(w, g, a.x_mid, N, a.mlp, d_resid_, scratch_);
  math_.attention_output_backward(w, g, a.attn, d_resid_, d_attn_, N);
  backend_.attention_backward(d_q_, d_k_, d_v_, d_attn_, a.attn, a.lse, attention_params(layer));
  math_.attention_input_backward(w, g, residual_[layer], positions_.data(), N, a.input, {d_q_, d_k_, d_v_}, d_resid_,
                                 scratch_);
}

LossStats Transformer::run(const Batch& batch, float* logits, bool backward, std::optional<double> grad_scale) {
  check_batch(config_, batch);
  reserve(batch.B, batch.T);
  doc_ids_ = batch.doc_ids;
  const int64_t N = int64_t{B_} * T_;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t position = batch.positions ? batch.positions[n] : static_cast<int32_t>(n % T_);
    positions_[n] = position;
    position_ids_[n] = position;
  }
  const GlobalTensors weights = global_tensors(layout_, params_), gradients = global_tensors(layout_, grads_);
  math_.embedding_forward(weights, batch.tokens, position_ids_.data(), residual_[0], N);
  for (int layer = 0; layer < config_.layers; ++layer) layer_forward(layer);
  if (backward) std::memset(d_resid_, 0, sizeof(float) * static_cast<size_t>(N) * config_.hidden);
  const double count = batch.targets ? counted_targets(batch.targets, batch.loss_mask, N) : 0.0;
  const double scale = grad_scale ? *grad_scale : (count > 0 ? 1.0 / count : 0.0);
  std::optional<HeadBackward> head_backward;
  if (backward) head_backward = HeadBackward{gradients, scale, d_resid_, scratch_.d_norm};
  double loss_sums[2] = {0.0, 0.0};  // the unchunked model's memory is the host's, as its arena is
  HeadScratch head = head_;
  head.loss_sums = loss_sums;
  math_.head_forward(weights, residual_[config_.layers], N, {.ids = batch.targets, .mask = batch.loss_mask},
                     final_norm_, head, head_backward, {.logits = logits});
  const LossStats stats{loss_sums[0], loss_sums[1]};
  if (!backward) return stats;
  for (int layer = config_.layers - 1; layer >= 0; --layer) layer_backward(layer);
  math_.embedding_backward(gradients, batch.tokens, position_ids_.data(), d_resid_, N);
  return stats;
}

LossStats Transformer::forward(const Batch& batch, float* logits) { return run(batch, logits, false, std::nullopt); }

LossStats Transformer::forward_backward(const Batch& batch, std::optional<double> grad_scale) {
  FPDT_CHECK(batch.targets != nullptr, "model", "forward_backward needs targets", "");
  return run(batch, nullptr, true, grad_scale);
}

}  // namespace fpdt::model

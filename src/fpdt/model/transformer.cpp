// Forward and backward of the whole model over B × T tokens (see transformer.h). Each layer's
// forward and backward sit side by side; the residual stream's gradient accumulates in d_resid_.
#include "fpdt/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fpdt/base/error.h"
#include "fpdt/kernels/reference/cross_entropy.h"

namespace fpdt::model {

namespace {
std::string layer_name(int layer, const char* tensor) { return "layers." + std::to_string(layer) + "." + tensor; }
constexpr size_t kLogitsChunkBytes = 32u << 20;  // the LM head never holds more logits than this
}  // namespace

Transformer::Transformer(const ModelConfig& config, kernels::Backend& backend, uint64_t seed)
    : config_(config),
      backend_(backend),
      layout_((config.validate(), config)),
      params_(layout_, "model parameters"),
      grads_(layout_, "parameter gradients") {
  init_parameters(config_, layout_, params_, seed);
}

void Transformer::reserve(int B, int64_t T) {
  if (B == B_ && T == T_) return;
  const int64_t N = int64_t{B} * T;
  const int64_t h = config_.hidden, f = config_.ffn_hidden, q = config_.q_dim(), kv = config_.kv_dim();
  const int64_t V = config_.vocab_size, L = config_.layers;
  head_chunk_tokens_ = std::clamp<int64_t>(static_cast<int64_t>(kLogitsChunkBytes / (4 * V)), 1, N);
  const bool llama = config_.family == Family::llama;

  const auto floats = [](int64_t count) { return align_up(static_cast<size_t>(count) * sizeof(float)); };
  const size_t per_layer = 4 * floats(N * h) + floats(2 * q * N) + floats(2 * kv * N) + floats(B * config_.heads * T) +
                           6 * floats(N) + (llama ? 3 : 2) * floats(N * f);
  const size_t total = (L + 1) * floats(N * h) + L * per_layer + 5 * floats(N * h) + floats(head_chunk_tokens_ * V) +
                       2 * floats(head_chunk_tokens_) + 2 * floats(N * q) + 2 * floats(N * kv) + 3 * floats(N * f) +
                       3 * floats(N);
  arena_ = Arena();  // release the old arena before taking a new one, so the peak does not double
  arena_ = Arena(Tier::compute, total, "activations for " + std::to_string(B) + " x " + std::to_string(T) + " tokens");
  B_ = B;
  T_ = T;

  residual_.assign(static_cast<size_t>(L + 1), nullptr);
  for (auto& stream : residual_) stream = arena_.take<float>(N * h);
  layers_.assign(static_cast<size_t>(L), {});
  for (auto& acts : layers_) {
    acts.norm1 = arena_.take<float>(N * h);
    acts.mean1 = arena_.take<float>(N);
    acts.rstd1 = arena_.take<float>(N);
    acts.q = arena_.take<float>(N * q);
    acts.k = arena_.take<float>(N * kv);
    acts.v = arena_.take<float>(N * kv);
    acts.attn = arena_.take<float>(N * q);
    acts.lse = arena_.take<float>(int64_t{B} * config_.heads * T);
    acts.x_mid = arena_.take<float>(N * h);
    acts.norm2 = arena_.take<float>(N * h);
    acts.mean2 = arena_.take<float>(N);
    acts.rstd2 = arena_.take<float>(N);
    acts.gate = arena_.take<float>(N * f);
    acts.up = llama ? arena_.take<float>(N * f) : nullptr;
    acts.act = arena_.take<float>(N * f);
  }
  final_norm_ = arena_.take<float>(N * h);
  final_mean_ = arena_.take<float>(N);
  final_rstd_ = arena_.take<float>(N);
  logits_chunk_ = arena_.take<float>(head_chunk_tokens_ * V);
  chunk_losses_ = arena_.take<float>(head_chunk_tokens_);
  chunk_lse_ = arena_.take<float>(head_chunk_tokens_);
  d_resid_ = arena_.take<float>(N * h);
  d_final_ = arena_.take<float>(N * h);
  d_norm_ = arena_.take<float>(N * h);
  d_attn_ = arena_.take<float>(N * q);
  d_q_ = arena_.take<float>(N * q);
  d_k_ = arena_.take<float>(N * kv);
  d_v_ = arena_.take<float>(N * kv);
  d_act_ = arena_.take<float>(N * f);
  d_gate_ = arena_.take<float>(N * f);
  d_up_ = arena_.take<float>(N * f);

  positions_.resize(static_cast<size_t>(N));
  position_ids_.resize(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    positions_[n] = n % T;
    position_ids_[n] = static_cast<int32_t>(n % T);
  }
}

void Transformer::check_batch(const Batch& batch) const {
  FPDT_CHECK(batch.B > 0 && batch.T > 0, "model",
             "empty batch (" + std::to_string(batch.B) + " x " + std::to_string(batch.T) + " tokens)", "");
  if (config_.learned_positions() && batch.T > config_.max_positions)
    throw Error("model",
                "sequence of " + std::to_string(batch.T) + " tokens exceeds the " +
                    std::to_string(config_.max_positions) + " learned positions of model '" + config_.name + "'",
                "lower --seq or use a RoPE (Llama) model");
  const int64_t N = int64_t{batch.B} * batch.T;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t token = batch.tokens[n];
    if (token < 0 || token >= config_.vocab_size)
      throw Error("model",
                  "token id " + std::to_string(token) + " at sequence " + std::to_string(n / batch.T) + " position " +
                      std::to_string(n % batch.T) + " is outside the vocabulary of " +
                      std::to_string(config_.vocab_size),
                  "the data was tokenized for another vocabulary");
    if (batch.targets == nullptr) continue;
    const int32_t target = batch.targets[n];
    if (target != kernels::reference::kIgnoreIndex && (target < 0 || target >= config_.vocab_size))
      throw Error("model", "target id " + std::to_string(target) + " at sequence " + std::to_string(n / batch.T) +
                               " position " + std::to_string(n % batch.T) + " is outside the vocabulary of " +
                               std::to_string(config_.vocab_size));
  }
}

const float* Transformer::bias_or_null(const std::string& name) const {
  return layout_.contains(name) ? params_.get(name) : nullptr;
}

float* Transformer::grad_bias_or_null(const std::string& name) {
  return layout_.contains(name) ? grads_.get(name) : nullptr;
}

void Transformer::norm_forward(float* out, float* mean, float* rstd, const float* x, const std::string& name,
                               int64_t N) {
  const float* weight = params_.get(name + ".weight");
  if (config_.family == Family::llama)
    backend_.rmsnorm_forward(out, rstd, x, weight, N, config_.hidden, config_.norm_eps);
  else
    backend_.layernorm_forward(out, mean, rstd, x, weight, params_.get(name + ".bias"), N, config_.hidden,
                               config_.norm_eps);
}

void Transformer::norm_backward(float* dx, const float* dout, const float* x, const float* mean, const float* rstd,
                                const std::string& name, int64_t N) {
  const float* weight = params_.get(name + ".weight");
  float* dweight = grads_.get(name + ".weight");
  if (config_.family == Family::llama)
    backend_.rmsnorm_backward(dx, dweight, dout, x, weight, rstd, N, config_.hidden);
  else
    backend_.layernorm_backward(dx, dweight, grads_.get(name + ".bias"), dout, x, weight, mean, rstd, N,
                                config_.hidden);
}

// ---- embeddings -------------------------------------------------------------------------------

void Transformer::embed_forward(const Batch& batch) {
  const int64_t N = int64_t{B_} * T_;
  backend_.embedding_forward(residual_[0], batch.tokens, params_.get("embed.weight"), N, config_.hidden, false);
  if (config_.learned_positions())
    backend_.embedding_forward(residual_[0], position_ids_.data(), params_.get("pos_embed.weight"), N,
                               config_.hidden, true);
}

void Transformer::embed_backward(const Batch& batch) {
  const int64_t N = int64_t{B_} * T_;
  backend_.embedding_backward(grads_.get("embed.weight"), d_resid_, batch.tokens, N, config_.hidden);
  if (config_.learned_positions())
    backend_.embedding_backward(grads_.get("pos_embed.weight"), d_resid_, position_ids_.data(), N, config_.hidden);
}

// ---- one transformer layer ----------------------------------------------------------------------

void Transformer::layer_forward(int layer) {
  LayerActivations& a = layers_[layer];
  const int64_t N = int64_t{B_} * T_;
  const int h = config_.hidden, f = config_.ffn_hidden, q = config_.q_dim(), kv = config_.kv_dim();
  const float* x_in = residual_[layer];
  float* x_out = residual_[layer + 1];

  // Attention block: x_mid = x_in + out_proj(attention(rope(qkv_proj(norm(x_in))))).
  norm_forward(a.norm1, a.mean1, a.rstd1, x_in, layer_name(layer, "attn_norm"), N);
  const float* w_qkv = params_.get(layer_name(layer, "attn.qkv.weight"));
  const float* b_qkv = bias_or_null(layer_name(layer, "attn.qkv.bias"));
  backend_.linear_forward(a.q, a.norm1, w_qkv, b_qkv, N, h, q, false);
  backend_.linear_forward(a.k, a.norm1, w_qkv + int64_t{q} * h, b_qkv ? b_qkv + q : nullptr, N, h, kv, false);
  backend_.linear_forward(a.v, a.norm1, w_qkv + int64_t{q + kv} * h, b_qkv ? b_qkv + q + kv : nullptr, N, h, kv,
                          false);
  if (config_.uses_rope()) {
    backend_.rope_forward(a.q, positions_.data(), N, config_.heads, config_.head_dim, config_.rotary_dim,
                          config_.rope_theta);
    backend_.rope_forward(a.k, positions_.data(), N, config_.kv_heads, config_.head_dim, config_.rotary_dim,
                          config_.rope_theta);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim));
  backend_.attention_forward(a.attn, a.lse, a.q, a.k, a.v, nullptr, B_, T_, config_.heads, config_.kv_heads,
                             config_.head_dim, scale);
  std::memcpy(a.x_mid, x_in, sizeof(float) * N * h);
  backend_.linear_forward(a.x_mid, a.attn, params_.get(layer_name(layer, "attn.out.weight")),
                          bias_or_null(layer_name(layer, "attn.out.bias")), N, q, h, true);

  // MLP block: x_out = x_mid + down(act(up(norm(x_mid)))).
  norm_forward(a.norm2, a.mean2, a.rstd2, a.x_mid, layer_name(layer, "mlp_norm"), N);
  const float* w_up = params_.get(layer_name(layer, "mlp.up.weight"));
  if (config_.family == Family::llama) {
    backend_.linear_forward(a.gate, a.norm2, w_up, nullptr, N, h, f, false);
    backend_.linear_forward(a.up, a.norm2, w_up + int64_t{f} * h, nullptr, N, h, f, false);
    backend_.swiglu_forward(a.act, a.gate, a.up, N * f);
  } else {
    backend_.linear_forward(a.gate, a.norm2, w_up, bias_or_null(layer_name(layer, "mlp.up.bias")), N, h, f, false);
    backend_.gelu_forward(a.act, a.gate, N * f);
  }
  std::memcpy(x_out, a.x_mid, sizeof(float) * N * h);
  backend_.linear_forward(x_out, a.act, params_.get(layer_name(layer, "mlp.down.weight")),
                          bias_or_null(layer_name(layer, "mlp.down.bias")), N, f, h, true);
}

// On entry d_resid_ holds dL/dx_out of this layer; on exit dL/dx_in.
void Transformer::layer_backward(int layer) {
  LayerActivations& a = layers_[layer];
  const int64_t N = int64_t{B_} * T_;
  const int h = config_.hidden, f = config_.ffn_hidden, q = config_.q_dim(), kv = config_.kv_dim();

  // MLP block. The skip connection passes d_resid_ through unchanged; the branch adds to it.
  backend_.linear_backward(d_act_, grads_.get(layer_name(layer, "mlp.down.weight")),
                           grad_bias_or_null(layer_name(layer, "mlp.down.bias")), d_resid_, a.act,
                           params_.get(layer_name(layer, "mlp.down.weight")), N, f, h, false);
  const float* w_up = params_.get(layer_name(layer, "mlp.up.weight"));
  float* dw_up = grads_.get(layer_name(layer, "mlp.up.weight"));
  if (config_.family == Family::llama) {
    backend_.swiglu_backward(d_gate_, d_up_, d_act_, a.gate, a.up, N * f);
    backend_.linear_backward(d_norm_, dw_up, nullptr, d_gate_, a.norm2, w_up, N, h, f, false);
    backend_.linear_backward(d_norm_, dw_up + int64_t{f} * h, nullptr, d_up_, a.norm2, w_up + int64_t{f} * h, N, h,
                             f, true);
  } else {
    backend_.gelu_backward(d_gate_, d_act_, a.gate, N * f);
    backend_.linear_backward(d_norm_, dw_up, grad_bias_or_null(layer_name(layer, "mlp.up.bias")), d_gate_, a.norm2,
                             w_up, N, h, f, false);
  }
  norm_backward(d_resid_, d_norm_, a.x_mid, a.mean2, a.rstd2, layer_name(layer, "mlp_norm"), N);

  // Attention block.
  backend_.linear_backward(d_attn_, grads_.get(layer_name(layer, "attn.out.weight")),
                           grad_bias_or_null(layer_name(layer, "attn.out.bias")), d_resid_, a.attn,
                           params_.get(layer_name(layer, "attn.out.weight")), N, q, h, false);
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim));
  backend_.attention_backward(d_q_, d_k_, d_v_, d_attn_, a.q, a.k, a.v, a.attn, a.lse, nullptr, B_, T_,
                              config_.heads, config_.kv_heads, config_.head_dim, scale);
  if (config_.uses_rope()) {
    backend_.rope_backward(d_q_, positions_.data(), N, config_.heads, config_.head_dim, config_.rotary_dim,
                           config_.rope_theta);
    backend_.rope_backward(d_k_, positions_.data(), N, config_.kv_heads, config_.head_dim, config_.rotary_dim,
                           config_.rope_theta);
  }
  const float* w_qkv = params_.get(layer_name(layer, "attn.qkv.weight"));
  float* dw_qkv = grads_.get(layer_name(layer, "attn.qkv.weight"));
  float* db_qkv = grad_bias_or_null(layer_name(layer, "attn.qkv.bias"));
  backend_.linear_backward(d_norm_, dw_qkv, db_qkv, d_q_, a.norm1, w_qkv, N, h, q, false);
  backend_.linear_backward(d_norm_, dw_qkv + int64_t{q} * h, db_qkv ? db_qkv + q : nullptr, d_k_, a.norm1,
                           w_qkv + int64_t{q} * h, N, h, kv, true);
  backend_.linear_backward(d_norm_, dw_qkv + int64_t{q + kv} * h, db_qkv ? db_qkv + q + kv : nullptr, d_v_, a.norm1,
                           w_qkv + int64_t{q + kv} * h, N, h, kv, true);
  norm_backward(d_resid_, d_norm_, residual_[layer], a.mean1, a.rstd1, layer_name(layer, "attn_norm"), N);
}

// ---- LM head and loss ---------------------------------------------------------------------------

LossStats Transformer::head_forward(const Batch& batch, float* logits, bool backward,
                                    std::optional<double> grad_scale) {
  const int64_t N = int64_t{B_} * T_;
  const int h = config_.hidden, V = config_.vocab_size;
  norm_forward(final_norm_, final_mean_, final_rstd_, residual_[config_.layers], "final_norm", N);
  const std::string head_name = config_.tie_embeddings ? "embed.weight" : "lm_head.weight";
  const float* w_head = params_.get(head_name);

  LossStats stats;
  if (batch.targets != nullptr) {
    for (int64_t n = 0; n < N; ++n)
      if (batch.targets[n] != kernels::reference::kIgnoreIndex) stats.count += batch.loss_mask ? batch.loss_mask[n] : 1.0;
  }
  const double dloss_scale = grad_scale ? *grad_scale : (stats.count > 0 ? 1.0 / stats.count : 0.0);

  for (int64_t begin = 0; begin < N; begin += head_chunk_tokens_) {
    const int64_t count = std::min(head_chunk_tokens_, N - begin);
    float* chunk_logits = logits ? logits + begin * V : logits_chunk_;
    backend_.linear_forward(chunk_logits, final_norm_ + begin * h, w_head, nullptr, count, h, V, false);
    if (batch.targets == nullptr) continue;
    const int32_t* targets = batch.targets + begin;
    const float* mask = batch.loss_mask ? batch.loss_mask + begin : nullptr;
    backend_.cross_entropy_forward(chunk_losses_, chunk_lse_, chunk_logits, targets, mask, count, V);
    for (int64_t n = 0; n < count; ++n) stats.loss_sum += chunk_losses_[n];
    if (!backward) continue;
    // dlogits overwrite the logits in place; then the head's input gradient and weight gradient.
    backend_.cross_entropy_backward(chunk_logits, chunk_logits, chunk_lse_, targets, mask, dloss_scale, count, V);
    backend_.linear_backward(d_final_ + begin * h, grads_.get(head_name), nullptr, chunk_logits,
                             final_norm_ + begin * h, w_head, count, h, V, false);
  }
  return stats;
}

// ---- whole model ----------------------------------------------------------------------------------

LossStats Transformer::forward(const Batch& batch, float* logits) {
  check_batch(batch);
  reserve(batch.B, batch.T);
  embed_forward(batch);
  for (int layer = 0; layer < config_.layers; ++layer) layer_forward(layer);
  return head_forward(batch, logits, false, std::nullopt);
}

LossStats Transformer::forward_backward(const Batch& batch, std::optional<double> grad_scale) {
  FPDT_CHECK(batch.targets != nullptr, "model", "forward_backward needs targets", "");
  check_batch(batch);
  reserve(batch.B, batch.T);
  embed_forward(batch);
  for (int layer = 0; layer < config_.layers; ++layer) layer_forward(layer);
  const LossStats stats = head_forward(batch, nullptr, true, grad_scale);

  const int64_t N = int64_t{B_} * T_;
  std::memset(d_resid_, 0, sizeof(float) * N * config_.hidden);
  norm_backward(d_resid_, d_final_, residual_[config_.layers], final_mean_, final_rstd_, "final_norm", N);
  for (int layer = config_.layers - 1; layer >= 0; --layer) layer_backward(layer);
  embed_backward(batch);
  return stats;
}

}  // namespace fpdt::model

// Token-local layer maths, forward and backward side by side (see layer.h).
#include "fpdt/model/layer.h"

#include <algorithm>

#include "fpdt/base/error.h"

namespace fpdt::model {

namespace {

// Tensor `name` inside the copy of its unit that starts at `unit`; null when the model has no such
// tensor or the unit was not given. T: float (values) or const uint16_t (bf16 words, one per float).
template <typename T>
T* in_unit(const ParameterLayout& layout, const std::string& name, T* unit) {
  if (unit == nullptr || !layout.contains(name)) return nullptr;
  const int64_t offset = layout.at(name).offset;
  return unit + (offset - layout.units()[static_cast<size_t>(layout.unit_of(offset))].begin);
}

}  // namespace

LayerTensors layer_tensors(const ParameterLayout& layout, const ParameterBlock& block, int layer) {
  const auto& units = layout.units();
  return layer_tensors(layout, layer, block.data() + units[static_cast<size_t>(ParameterLayout::qkv_unit(layer))].begin,
                       block.data() + units[static_cast<size_t>(ParameterLayout::mlp_unit(layer))].begin);
}

LayerTensors layer_tensors(const ParameterLayout& layout, int layer, float* qkv_unit, float* mlp_unit,
                           const uint16_t* qkv_unit_bf16, const uint16_t* mlp_unit_bf16) {
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  auto qkv = [&](const char* name) { return in_unit(layout, prefix + name, qkv_unit); };
  auto mlp = [&](const char* name) { return in_unit(layout, prefix + name, mlp_unit); };
  auto qkv16 = [&](const char* name) { return in_unit(layout, prefix + name, qkv_unit_bf16); };
  auto mlp16 = [&](const char* name) { return in_unit(layout, prefix + name, mlp_unit_bf16); };
  LayerTensors t{qkv("attn_norm.weight"), qkv("attn_norm.bias"), qkv("attn.qkv.weight"), qkv("attn.qkv.bias"),
                 mlp("attn.out.weight"),  mlp("attn.out.bias"),  mlp("mlp_norm.weight"), mlp("mlp_norm.bias"),
                 mlp("mlp.up.weight"),    mlp("mlp.up.bias"),    mlp("mlp.down.weight"), mlp("mlp.down.bias")};
  t.qkv_weight_bf16 = qkv16("attn.qkv.weight");
  t.out_weight_bf16 = mlp16("attn.out.weight");
  t.up_weight_bf16 = mlp16("mlp.up.weight");
  t.down_weight_bf16 = mlp16("mlp.down.weight");
  return t;
}

GlobalTensors global_tensors(const ParameterLayout& layout, const ParameterBlock& block) {
  const auto& units = layout.units();
  return global_tensors(layout, block.data() + units.front().begin, block.data() + units.back().begin);
}

GlobalTensors global_tensors(const ParameterLayout& layout, float* embeddings, float* head,
                             const uint16_t* head_unit_bf16) {
  const bool tied = !layout.contains("lm_head.weight");
  const char* head_name = tied ? "embed.weight" : "lm_head.weight";
  GlobalTensors t{in_unit(layout, "embed.weight", embeddings), in_unit(layout, "pos_embed.weight", embeddings),
                  in_unit(layout, "final_norm.weight", head), in_unit(layout, "final_norm.bias", head),
                  in_unit(layout, head_name, tied ? embeddings : head)};
  t.head_bf16 = in_unit(layout, head_name, head_unit_bf16);
  return t;
}

double counted_targets(const int32_t* targets, const float* mask, int64_t n) {
  double count = 0.0;
  for (int64_t i = 0; i < n; ++i)
    if (targets[i] != kernels::kIgnoreIndex) count += mask ? mask[i] : 1.0;
  return count;
}

void LayerMath::norm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                             const float* bias, int64_t n) {
  if (config_.family == Family::llama)
    backend_.rmsnorm_forward(out, rstd, x, weight, n, config_.hidden, config_.norm_eps);
  else
    backend_.layernorm_forward(out, mean, rstd, x, weight, bias, n, config_.hidden, config_.norm_eps);
  round_kept(out, n * config_.hidden);
}

void LayerMath::round_kept(float* x, int64_t n) {
  if (precision_ == kernels::Precision::bf16) backend_.round_to_bf16(x, n);
}

void LayerMath::norm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                              const float* weight, const float* mean, const float* rstd, int64_t n) {
  if (config_.family == Family::llama)
    backend_.rmsnorm_backward(dx, dweight, dout, x, weight, rstd, n, config_.hidden);
  else
    backend_.layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, n, config_.hidden);
}

// ---- embeddings -------------------------------------------------------------------------------

void LayerMath::embedding_forward(const GlobalTensors& w, const int32_t* tokens, const int32_t* position_ids,
                                  float* x, int64_t n) {
  backend_.embedding_forward(x, tokens, w.embed, n, config_.hidden, false);
  if (config_.learned_positions()) backend_.embedding_forward(x, position_ids, w.pos_embed, n, config_.hidden, true);
  round_kept(x, n * config_.hidden);
}

void LayerMath::embedding_backward(const GlobalTensors& g, const int32_t* tokens, const int32_t* position_ids,
                                   const float* dx, int64_t n) {
  backend_.embedding_backward(g.embed, dx, tokens, n, config_.hidden);
  if (config_.learned_positions()) backend_.embedding_backward(g.pos_embed, dx, position_ids, n, config_.hidden);
}

// ---- attention input: norm → q, k, v → RoPE ------------------------------------------------------

void LayerMath::attention_input_forward(const LayerTensors& w, const float* x, const int64_t* pos, int64_t n,
                                        const AttentionInput& saved, float* q, float* k, float* v) {
  const int h = config_.hidden, qd = config_.q_dim(), kvd = config_.kv_dim();
  norm_forward(saved.norm, saved.mean, saved.rstd, x, w.attn_norm_weight, w.attn_norm_bias, n);
  const float* b = w.qkv_bias;
  const kernels::WeightMatrix qkv(w.qkv_weight, w.qkv_weight_bf16);  // (qd + 2·kvd, h): q | k | v rows
  backend_.linear_forward(q, saved.norm, qkv, b, n, h, qd, false, precision_);
  backend_.linear_forward(k, saved.norm, qkv.rows_from(qd, h), b ? b + qd : nullptr, n, h, kvd, false, precision_);
  backend_.linear_forward(v, saved.norm, qkv.rows_from(qd + kvd, h), b ? b + qd + kvd : nullptr, n, h, kvd, false,
                          precision_);
  if (config_.uses_rope()) {
    backend_.rope_forward(q, pos, n, config_.heads, config_.head_dim, rope_.params());
    backend_.rope_forward(k, pos, n, config_.kv_heads, config_.head_dim, rope_.params());
  }
  round_kept(q, n * qd);
  round_kept(k, n * kvd);
  round_kept(v, n * kvd);
}

void LayerMath::attention_input_backward(const LayerTensors& w, const LayerTensors& g, const float* x,
                                         const int64_t* pos, int64_t n, const AttentionInput& saved,
                                         const QkvGradients& d_qkv, float* dx, const LayerScratch& scratch) {
  const int h = config_.hidden, qd = config_.q_dim(), kvd = config_.kv_dim();
  auto [dq, dk, dv] = d_qkv;
  if (config_.uses_rope()) {
    backend_.rope_backward(dq, pos, n, config_.heads, config_.head_dim, rope_.params());
    backend_.rope_backward(dk, pos, n, config_.kv_heads, config_.head_dim, rope_.params());
  }
  float* db = g.qkv_bias;
  const kernels::WeightMatrix qkv(w.qkv_weight, w.qkv_weight_bf16);  // (qd + 2·kvd, h): q | k | v rows
  backend_.linear_backward(scratch.d_norm, g.qkv_weight, db, dq, saved.norm, qkv, {n, h, qd}, false, precision_);
  backend_.linear_backward(scratch.d_norm, g.qkv_weight + int64_t{qd} * h, db ? db + qd : nullptr, dk, saved.norm,
                           qkv.rows_from(qd, h), {n, h, kvd}, true, precision_);
  backend_.linear_backward(scratch.d_norm, g.qkv_weight + int64_t{qd + kvd} * h, db ? db + qd + kvd : nullptr, dv,
                           saved.norm, qkv.rows_from(qd + kvd, h), {n, h, kvd}, true, precision_);
  norm_backward(dx, g.attn_norm_weight, g.attn_norm_bias, scratch.d_norm, x, w.attn_norm_weight, saved.mean,
                saved.rstd, n);
  round_kept(dx, n * h);
}

// ---- attention output projection ----------------------------------------------------------------

void LayerMath::attention_output_forward(const LayerTensors& w, const float* attn, const float* x, float* x_mid,
                                         int64_t n) {
  if (x_mid != x) backend_.memory().copy(x_mid, x, sizeof(float) * static_cast<size_t>(n) * config_.hidden);
  backend_.linear_forward(x_mid, attn, {w.out_weight, w.out_weight_bf16}, w.out_bias, n, config_.q_dim(), config_.hidden, true, precision_);
  round_kept(x_mid, n * config_.hidden);
}

void LayerMath::attention_output_backward(const LayerTensors& w, const LayerTensors& g, const float* attn,
                                          const float* d_mid, float* d_attn, int64_t n) {
  backend_.linear_backward(d_attn, g.out_weight, g.out_bias, d_mid, attn, {w.out_weight, w.out_weight_bf16},
                           {n, config_.q_dim(), config_.hidden}, false, precision_);
}

// ---- MLP --------------------------------------------------------------------------------------------

void LayerMath::mlp_forward(const LayerTensors& w, const float* x_mid, float* x_out, int64_t n,
                            const MlpActivations& saved) {
  const int h = config_.hidden, f = config_.ffn_hidden;
  norm_forward(saved.norm, saved.mean, saved.rstd, x_mid, w.mlp_norm_weight, w.mlp_norm_bias, n);
  const kernels::WeightMatrix up(w.up_weight, w.up_weight_bf16);  // Llama (2f, h): gate | up rows; GPT (f, h)
  if (config_.family == Family::llama) {
    backend_.linear_forward(saved.gate, saved.norm, up, nullptr, n, h, f, false, precision_);
    backend_.linear_forward(saved.up, saved.norm, up.rows_from(f, h), nullptr, n, h, f, false, precision_);
    backend_.swiglu_forward(saved.act, saved.gate, saved.up, n * f, precision_);  // bf16: gate, up, act kept
  } else {
    backend_.linear_forward(saved.gate, saved.norm, up, w.up_bias, n, h, f, false, precision_);
    backend_.gelu_forward(saved.act, saved.gate, n * f, precision_);  // bf16: gate, act kept
  }
  if (x_out != x_mid) backend_.memory().copy(x_out, x_mid, sizeof(float) * static_cast<size_t>(n) * h);
  backend_.linear_forward(x_out, saved.act, {w.down_weight, w.down_weight_bf16}, w.down_bias, n, f, h, true, precision_);
  round_kept(x_out, n * h);
}

void LayerMath::mlp_backward(const LayerTensors& w, const LayerTensors& g, const float* x_mid, int64_t n,
                             const MlpActivations& saved, float* d_res, const LayerScratch& scratch) {
  const int h = config_.hidden, f = config_.ffn_hidden;
  backend_.linear_backward(scratch.d_act, g.down_weight, g.down_bias, d_res, saved.act,
                           {w.down_weight, w.down_weight_bf16}, {n, f, h}, false, precision_);
  const kernels::WeightMatrix up(w.up_weight, w.up_weight_bf16);  // Llama (2f, h): gate | up rows; GPT (f, h)
  if (config_.family == Family::llama) {
    // bf16: d_gate, d_up rounded for the products (layer.h)
    backend_.swiglu_backward(scratch.d_gate, scratch.d_up, scratch.d_act, saved.gate, saved.up, n * f, precision_);
    backend_.linear_backward(scratch.d_norm, g.up_weight, nullptr, scratch.d_gate, saved.norm, up, {n, h, f}, false,
                             precision_);
    backend_.linear_backward(scratch.d_norm, g.up_weight + int64_t{f} * h, nullptr, scratch.d_up, saved.norm,
                             up.rows_from(f, h), {n, h, f}, true, precision_);
  } else {
    backend_.gelu_backward(scratch.d_gate, scratch.d_act, saved.gate, n * f);
    backend_.linear_backward(scratch.d_norm, g.up_weight, g.up_bias, scratch.d_gate, saved.norm, up, {n, h, f},
                             false, precision_);
  }
  norm_backward(d_res, g.mlp_norm_weight, g.mlp_norm_bias, scratch.d_norm, x_mid, w.mlp_norm_weight, saved.mean,
                saved.rstd, n);
  round_kept(d_res, n * h);
}

// ---- final norm, LM head, loss -------------------------------------------------------------------

void LayerMath::head_forward(const GlobalTensors& w, const float* x, int64_t n, const Targets& targets,
                             const AttentionInput& saved, const HeadScratch& scratch,
                             const std::optional<HeadBackward>& backward, const HeadOutputs& outputs) {
  const int h = config_.hidden, V = config_.vocab_size;
  const TokenResults& per_token = outputs.per_token;
  // The backward's tensors (training); null without one.
  const GlobalTensors* g = backward ? &backward->g : nullptr;
  float* dx = backward ? backward->dx : nullptr;
  float* d_norm = backward ? backward->d_norm : nullptr;
  norm_forward(saved.norm, saved.mean, saved.rstd, x, w.final_norm_weight, w.final_norm_bias, n);
  FPDT_ASSERT(targets.ids == nullptr || scratch.loss_sums != nullptr);

  for (int64_t begin = 0; begin < n; begin += scratch.chunk_tokens) {
    const int64_t count = std::min(scratch.chunk_tokens, n - begin);
    float* chunk_logits = outputs.logits ? outputs.logits + begin * V : scratch.logits;
    backend_.linear_forward(chunk_logits, saved.norm + begin * h, {w.head, w.head_bf16}, nullptr, count, h, V, false, precision_);
    if (per_token.predictions != nullptr) backend_.argmax_rows(per_token.predictions + begin, chunk_logits, count, V);
    if (targets.ids == nullptr) continue;
    const int32_t* chunk_targets = targets.ids + begin;
    const float* chunk_mask = targets.mask ? targets.mask + begin : nullptr;
    backend_.cross_entropy_forward(scratch.losses, scratch.lse, chunk_logits, chunk_targets, chunk_mask, count, V);
    backend_.cross_entropy_sums(scratch.loss_sums, scratch.losses, chunk_targets, chunk_mask, count);
    if (per_token.losses != nullptr)
      backend_.memory().download(per_token.losses + begin, scratch.losses, static_cast<size_t>(count) * sizeof(float));
    if (dx == nullptr) continue;
    // dlogits overwrite the logits in place; then the head's input gradient and weight gradient.
    backend_.cross_entropy_backward(chunk_logits, chunk_logits, scratch.lse, chunk_targets, chunk_mask,
                                    backward->grad_scale, count, V);
    round_for_product(chunk_logits, count * V);
    backend_.linear_backward(d_norm + begin * h, g->head, nullptr, chunk_logits, saved.norm + begin * h,
                             {w.head, w.head_bf16}, {count, h, V}, false, precision_);
  }
  if (dx != nullptr) {
    norm_backward(dx, g->final_norm_weight, g->final_norm_bias, d_norm, x, w.final_norm_weight, saved.mean,
                  saved.rstd, n);
    round_kept(dx, n * h);
  }
}

}  // namespace fpdt::model

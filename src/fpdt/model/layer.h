// The token-local maths of the model over any n tokens: embeddings, a layer's attention input
// (norm → q, k, v → RoPE), its output projection, its MLP, and the final norm + LM head + loss —
// forward and backward side by side. Attention itself (which needs other tokens) is not here: the
// caller runs it, whole-sequence (Transformer) or chunk by chunk across ranks (the FPDT pipeline).
// These functions know nothing of chunks, ranks or tiers; buffers are the caller's.
#pragma once

#include <cstdint>
#include <optional>

#include "fpdt/kernels/backend.h"
#include "fpdt/model/config.h"
#include "fpdt/model/parameters.h"
#include "fpdt/model/rope.h"

namespace fpdt::model {

// Pointers to one layer's tensors in a ParameterBlock (weights or gradients); biases are null for Llama.
struct LayerTensors {
  float* attn_norm_weight;
  float* attn_norm_bias;
  float* qkv_weight;  // (Hq·D + 2·Hkv·D, h): q | k | v rows
  float* qkv_bias;
  float* out_weight;  // (h, Hq·D)
  float* out_bias;
  float* mlp_norm_weight;
  float* mlp_norm_bias;
  float* up_weight;   // Llama (2f, h): gate | up rows; GPT (f, h)
  float* up_bias;
  float* down_weight; // (h, f)
  float* down_bias;
  // A bf16 run's working copy of the matrices (bf16 words, pipeline/model_states.h), read by the GEMMs
  // instead of the values; null in fp32, in gradients, and where no copy is kept (the GEMMs round then).
  const uint16_t* qkv_weight_bf16 = nullptr;
  const uint16_t* out_weight_bf16 = nullptr;
  const uint16_t* up_weight_bf16 = nullptr;
  const uint16_t* down_weight_bf16 = nullptr;
};
// In a whole block, or in copies of the layer's two units (their first floats: ZeRO-3's gathered
// copies; a null unit leaves its tensors null). qkv_unit_bf16, mlp_unit_bf16: the units' bf16 words,
// one per float of the unit's layout (the working copy), or null.
LayerTensors layer_tensors(const ParameterLayout& layout, const ParameterBlock& block, int layer);
LayerTensors layer_tensors(const ParameterLayout& layout, int layer, float* qkv_unit, float* mlp_unit,
                           const uint16_t* qkv_unit_bf16 = nullptr, const uint16_t* mlp_unit_bf16 = nullptr);

// Pointers to the tensors outside the layers (weights or gradients); null where the model has none or
// where their unit was not given.
struct GlobalTensors {
  float* embed;              // (V, h)
  float* pos_embed;          // (max_positions, h) GPT
  float* final_norm_weight;  // (h)
  float* final_norm_bias;    // (h) GPT
  float* head;               // (V, h): lm_head, or embed when the embeddings are tied
  const uint16_t* head_bf16 = nullptr;  // the head's bf16 words (as LayerTensors' *_bf16), or null
};
GlobalTensors global_tensors(const ParameterLayout& layout, const ParameterBlock& block);
// embeddings, head: the first floats of the embedding and head units (either may be null); head_bf16:
// the bf16 words of the unit that holds the head matrix (the embeddings' when tied), or null.
GlobalTensors global_tensors(const ParameterLayout& layout, float* embeddings, float* head,
                             const uint16_t* head_unit_bf16 = nullptr);

// What the attention-input step saves for its backward.
struct AttentionInput {
  float* norm;  // (n, h)
  float* mean;  // (n) LayerNorm only
  float* rstd;  // (n)
};

// What the MLP saves for its backward.
struct MlpActivations {
  float* norm;  // (n, h)
  float* mean;  // (n)
  float* rstd;  // (n)
  float* gate;  // (n, f) Llama gate / GPT fc pre-activation
  float* up;    // (n, f) Llama only
  float* act;   // (n, f) input of the down projection
};

// The gradients of the attention input's q, k, v: what the attention backward leaves for the QKV
// projection's backward.
struct QkvGradients {
  float* dq;  // (n, Hq·D)
  float* dk;  // (n, Hkv·D)
  float* dv;  // (n, Hkv·D)
};

// Scratch the backward steps need, each at least n tokens long.
struct LayerScratch {
  float* d_norm;  // (n, h)
  float* d_act;   // (n, f)
  float* d_gate;  // (n, f)
  float* d_up;    // (n, f)
};

struct LossStats {
  double loss_sum = 0.0;  // Σ over counted positions of mask · cross-entropy
  double count = 0.0;     // Σ over counted positions of mask (the number of counted tokens)
  double mean() const { return count > 0 ? loss_sum / count : 0.0; }
};

// Σ mask over positions whose target is not kIgnoreIndex (mask null: the number of such positions).
double counted_targets(const int32_t* targets, const float* mask, int64_t n);

// Working memory of the LM head for up to `chunk_tokens` tokens at a time (logits never exceed it).
struct HeadScratch {
  int64_t chunk_tokens;
  float* logits;      // (chunk_tokens, V); holds the logits' gradient after backward
  float* losses;      // (chunk_tokens)
  float* lse;         // (chunk_tokens)
  double* loss_sums;  // (2) += Σ losses, Σ counted rows (LossStats' fields), left on the backend; null: no targets
};

// Per-token results of the LM head over n tokens (host memory), written when non-null. Like the loss
// sums, they come back through backend ops and copies: the logits and losses stay in the backend's memory.
struct TokenResults {
  float* losses = nullptr;         // (n) mask · cross-entropy of each token (0 where its target is ignored)
  int32_t* predictions = nullptr;  // (n) argmax of its logits (the lowest id among equals): the greedy next token
};

// What the loss compares the LM head's logits with, for n tokens.
struct Targets {
  const int32_t* ids = nullptr;  // (n) each token's target id (kIgnoreIndex: not counted); null: no loss
  const float* mask = nullptr;   // (n) each token's weight in the loss; null: 1
};

// The LM head's backward (training): L = grad_scale · Σ losses.
struct HeadBackward {
  GlobalTensors g;    // the final norm's and LM head's gradients, +=
  double grad_scale;
  float* dx;          // (n, h) += dL/dx
  float* d_norm;      // (n, h) scratch: dL/d(the final norm's output)
};

// What the LM head writes besides the loss sums, where non-null.
struct HeadOutputs {
  float* logits = nullptr;      // (n, V) in the backend's memory
  TokenResults per_token = {};  // in host memory
};

// The precision of the model's maths (kernels::Precision, DESIGN.md §4). In bf16 every GEMM takes
// Precision::bf16 (its products' inputs rounded to bf16, fp32 sums), and so does attention (the caller's),
// and the activations the model KEEPS are bf16 values in fp32 lanes, each rounded once where it is
// produced (by the round_to_bf16 op, or by the MLP's activation op as it writes them) — at these points,
// the one list of them:
//   embedding_forward          x, the first layer's input
//   norm_forward               the output of every norm: attention, MLP and final (mean, rstd stay fp32)
//   attention_input_forward    q and k after RoPE, v
//   the caller (round_kept)    the attention output o, once all its kv blocks are merged
//   attention_output_forward   x_mid
//   mlp_forward                gate, up (Llama), act (by swiglu_forward / gelu_forward), and x_out: the
//                              next layer's input
// and in backward the gradient along the residual stream, where each sublayer's backward leaves it (as the
// forward rounds x, x_mid, x_out: what a bf16 model's residual gradient is, and what the store keeps):
//   head_forward (backward)    dL/dx of the last layer's output
//   mlp_backward               dL/dx_mid
//   attention_input_backward   dL/dx of the layer's input
// The unchunked Transformer and the FPDT pipeline round at the same points, so a value recomputed in a
// backward is bitwise the value kept, and the pipeline's bf16 store holds them exactly (pack_bf16).
// Two gradients that one bias-free product reads and nothing after it are rounded in place first
// (round_for_product): the dlogits (head_forward) and Llama's dgate, dup (mlp_backward, by swiglu_backward
// as it writes them). The product rounds its input anyway (the same values, rounding twice changes nothing);
// in place, the cpu backend's bf16 GEMMs read them there instead of a rounded copy in scratch as large as
// they are (count·V floats of logits).
// Everything else is fp32 in both precisions: statistics (mean, rstd, LSE, Δ), the logits and the losses,
// every other gradient (the weights', q/k/v's, dQ's sums), the weights (the GEMMs round them on the way
// in, or read the run's bf16 working copy of the matrices: LayerTensors' *_bf16, the same values).
class LayerMath {
 public:
  LayerMath(const ModelConfig& config, kernels::Backend& backend,
            kernels::Precision precision = kernels::Precision::fp32)
      : config_(config), backend_(backend), precision_(precision), rope_(rope_frequencies(config)) {}
  const ModelConfig& config() const { return config_; }
  kernels::Precision precision() const { return precision_; }

  // x (n, h) → q (n, Hq·D), k, v (n, Hkv·D), RoPE applied at positions pos (n) (Llama).
  void attention_input_forward(const LayerTensors& w, const float* x, const int64_t* pos, int64_t n,
                               const AttentionInput& saved, float* q, float* k, float* v);
  // From d_qkv — dq and dk overwritten by the RoPE backward — to dx (n, h) += and the weight grads +=.
  void attention_input_backward(const LayerTensors& w, const LayerTensors& g, const float* x, const int64_t* pos,
                                int64_t n, const AttentionInput& saved, const QkvGradients& d_qkv, float* dx,
                                const LayerScratch& scratch);

  // x_mid (n, h) = x (n, h) + attn (n, Hq·D) · outᵀ + bias. x_mid may alias x (in place).
  void attention_output_forward(const LayerTensors& w, const float* attn, const float* x, float* x_mid, int64_t n);
  // d_attn (n, Hq·D) = d_mid · out (overwritten); out weight and bias grads +=. (d_mid also flows to
  // x unchanged through the skip connection: the caller keeps it.)
  void attention_output_backward(const LayerTensors& w, const LayerTensors& g, const float* attn, const float* d_mid,
                                 float* d_attn, int64_t n);

  // x_out (n, h) = x_mid + down(act(up(norm(x_mid)))). x_out may alias x_mid.
  void mlp_forward(const LayerTensors& w, const float* x_mid, float* x_out, int64_t n, const MlpActivations& saved);
  // d_res (n, h): on entry dL/dx_out, on exit dL/dx_mid (the MLP branch added); weight grads +=.
  void mlp_backward(const LayerTensors& w, const LayerTensors& g, const float* x_mid, int64_t n,
                    const MlpActivations& saved, float* d_res, const LayerScratch& scratch);

  // x (n, h) = token embedding (+ learned position embedding at position_ids, GPT).
  void embedding_forward(const GlobalTensors& w, const int32_t* tokens, const int32_t* position_ids, float* x,
                         int64_t n);
  void embedding_backward(const GlobalTensors& g, const int32_t* tokens, const int32_t* position_ids, const float* dx,
                          int64_t n);

  // Final norm, LM head and cross-entropy over n tokens of the last residual stream x (n, h), in token
  // chunks of scratch.chunk_tokens. saved: the final norm's output and statistics. With a backward
  // (training, targets given) also dx += dL/dx and the final norm's and LM head's gradients +=.
  // outputs: the logits, each token's loss (with targets) and greedy prediction, where asked. With
  // targets, scratch.loss_sums += the loss sums, in the backend's memory: the caller reads them back once.
  void head_forward(const GlobalTensors& w, const float* x, int64_t n, const Targets& targets,
                         const AttentionInput& saved, const HeadScratch& scratch,
                         const std::optional<HeadBackward>& backward, const HeadOutputs& outputs = {});

  // x (n) rounded to bf16 in bf16 (a kept activation: the list above); nothing in fp32.
  void round_kept(float* x, int64_t n);
  // The same for a gradient whose only reader is a product without a bias (the list above).
  void round_for_product(float* dout, int64_t n) { round_kept(dout, n); }

  // Norm dispatch on the family: RMSNorm (Llama) or LayerNorm (GPT); out is kept (rounded in bf16).
  // dx accumulates.
  void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight, const float* bias,
                    int64_t n);
  void norm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x, const float* weight,
                     const float* mean, const float* rstd, int64_t n);

 private:
  const ModelConfig& config_;
  kernels::Backend& backend_;
  kernels::Precision precision_;
  RopeFrequencies rope_;  // the config's RoPE table, made once
};

}  // namespace fpdt::model

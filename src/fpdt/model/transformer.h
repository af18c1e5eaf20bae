// The transformer's maths over a batch of B sequences of T tokens: forward, loss and backward, for
// the Llama and GPT families, computed through a kernels::Backend. Activations for backward are kept
// in one compute-tier arena sized by reserve(B, T) and reused by every step (no allocation inside a
// step). This is the unchunked model: the FPDT pipeline drives the same layer maths chunk by chunk.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fpdt/kernels/backend.h"
#include "fpdt/model/config.h"
#include "fpdt/model/parameters.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::model {

// One step's tokens. Targets are the next-token ids given explicitly (not shifted here);
// kIgnoreIndex (−100) positions are not counted. loss_mask (optional) weighs counted positions.
struct Batch {
  int B = 1;
  int64_t T = 0;
  const int32_t* tokens = nullptr;   // (B, T)
  const int32_t* targets = nullptr;  // (B, T)
  const float* loss_mask = nullptr;  // (B, T) or null
};

struct LossStats {
  double loss_sum = 0.0;  // Σ over counted positions of mask · cross-entropy
  double count = 0.0;     // Σ over counted positions of mask (the number of counted tokens)
  double mean() const { return count > 0 ? loss_sum / count : 0.0; }
};

class Transformer {
 public:
  // Parameters are initialised from `seed` (see init_parameters); gradients start at zero.
  Transformer(const ModelConfig& config, kernels::Backend& backend, uint64_t seed = 1234);

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  ParameterBlock& params() { return params_; }
  ParameterBlock& grads() { return grads_; }
  kernels::Backend& backend() { return backend_; }

  // Sizes the activation arena for B × T tokens (the only allocation of a training step). Called
  // implicitly by forward/forward_backward when the shape changes.
  void reserve(int B, int64_t T);

  // Forward and backward: gradients are ACCUMULATED into grads() (+=), scaled so that they are the
  // gradient of grad_scale · Σ losses (default: 1 / count, i.e. of this batch's mean loss).
  LossStats forward_backward(const Batch& batch, std::optional<double> grad_scale = std::nullopt);

  // Forward only. logits (B, T, V) are written when non-null; targets may be null when only logits
  // are wanted.
  LossStats forward(const Batch& batch, float* logits = nullptr);

 private:
  struct LayerActivations {
    float* norm1;  // (N, h)   attention norm output
    float* mean1;  // (N)      LayerNorm only
    float* rstd1;  // (N)
    float* q;      // (N, Hq·D)  after RoPE
    float* k;      // (N, Hkv·D) after RoPE
    float* v;      // (N, Hkv·D)
    float* attn;   // (N, Hq·D)  attention output, before the output projection
    float* lse;    // (B, Hq, T)
    float* x_mid;  // (N, h)   residual stream after attention
    float* norm2;  // (N, h)
    float* mean2;  // (N)
    float* rstd2;  // (N)
    float* gate;   // (N, f)   Llama: gate pre-activation; GPT: fc pre-activation
    float* up;     // (N, f)   Llama only
    float* act;    // (N, f)   MLP activation output, input of the down projection
  };

  void check_batch(const Batch& batch) const;
  void embed_forward(const Batch& batch);
  void layer_forward(int layer);
  void layer_backward(int layer);
  // Final norm, LM head and cross-entropy over token chunks; with `backward`, also the gradient
  // of the final norm output into d_final_ and the LM head's weight gradient.
  LossStats head_forward(const Batch& batch, float* logits, bool backward, std::optional<double> grad_scale);
  void embed_backward(const Batch& batch);

  // Norms dispatch on the family (RMSNorm for Llama, LayerNorm for GPT).
  void norm_forward(float* out, float* mean, float* rstd, const float* x, const std::string& name, int64_t N);
  void norm_backward(float* dx, const float* dout, const float* x, const float* mean, const float* rstd,
                     const std::string& name, int64_t N);
  const float* bias_or_null(const std::string& name) const;
  float* grad_bias_or_null(const std::string& name);

  ModelConfig config_;
  kernels::Backend& backend_;
  ParameterLayout layout_;
  ParameterBlock params_;
  ParameterBlock grads_;

  int B_ = 0;
  int64_t T_ = 0;
  int64_t head_chunk_tokens_ = 0;
  Arena arena_;
  std::vector<float*> residual_;  // L + 1 of (N, h): residual_[l] is layer l's input
  std::vector<LayerActivations> layers_;
  std::vector<int64_t> positions_;      // (N) RoPE positions
  std::vector<int32_t> position_ids_;   // (N) learned position ids
  float* final_norm_;   // (N, h)
  float* final_mean_;   // (N)
  float* final_rstd_;   // (N)
  float* logits_chunk_; // (head_chunk_tokens, V)
  float* chunk_losses_; // (head_chunk_tokens)
  float* chunk_lse_;    // (head_chunk_tokens)
  // Backward scratch, reused by every layer.
  float* d_resid_;   // (N, h) gradient of the residual stream
  float* d_final_;   // (N, h) gradient of the final norm output
  float* d_norm_;    // (N, h)
  float* d_attn_;    // (N, Hq·D)
  float* d_q_;       // (N, Hq·D)
  float* d_k_;       // (N, Hkv·D)
  float* d_v_;       // (N, Hkv·D)
  float* d_act_;     // (N, f)
  float* d_gate_;    // (N, f)
  float* d_up_;      // (N, f)
};

}  // namespace fpdt::model

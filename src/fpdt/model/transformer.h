// The whole model over a batch of B sequences of T tokens on one rank: forward, loss and backward,
// for the Llama and GPT families, computed through a kernels::Backend. The layer maths is layer.h's;
// attention runs over the whole sequence at once. Activations for backward live in one compute-tier
// arena sized by reserve(B, T) and reused by every step (no allocation inside a step). This is the
// unchunked reference model that the FPDT pipeline is held against.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fpdt/kernels/backend.h"
#include "fpdt/model/config.h"
#include "fpdt/model/layer.h"
#include "fpdt/model/parameters.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::model {

// One step's tokens. Targets are the next-token ids given explicitly (not shifted here);
// kIgnoreIndex (−100) positions are not counted. loss_mask (optional) weighs counted positions.
struct Batch {
  int B = 1;
  int64_t T = 0;
  const int32_t* tokens = nullptr;   // (B, T)
  const int32_t* targets = nullptr;  // (B, T) or null (forward only)
  const float* loss_mask = nullptr;  // (B, T) or null
  const int32_t* doc_ids = nullptr;  // (B, T) or null: a token attends only to tokens with its own id
  const int32_t* positions = nullptr;  // (B, T) or null (0..T−1): each token's position (RoPE, learned
                                       // positions), e.g. restarting at each packed document
};

// Throws fpdt::Error naming the sequence and position of the first token or target outside the
// vocabulary or the first negative position (or one past the learned position table), or a sequence
// longer than the model's learned position table.
void check_batch(const ModelConfig& config, const Batch& batch);

class Transformer {
 public:
  // Parameters are initialised from `seed` (see init_parameters); gradients start at zero. precision: the
  // maths' (layer.h: in bf16 the GEMMs and attention round their inputs, the kept activations are bf16).
  Transformer(const ModelConfig& config, kernels::Backend& backend, uint64_t seed = 1234,
              kernels::Precision precision = kernels::Precision::fp32);

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  ParameterBlock& params() { return params_; }
  ParameterBlock& grads() { return grads_; }
  kernels::Backend& backend() { return backend_; }

  // Sizes the activation arena for B × T tokens (the only allocation of a training step). Called
  // implicitly by forward/forward_backward when the shape changes.
  void reserve(int B, int64_t T);
  // The arena reserve(B, T) takes for `config`, in bytes; nullopt when it does not fit 64 bits.
  static std::optional<size_t> activation_bytes(const ModelConfig& config, int B, int64_t T);

  // Forward and backward: gradients are ACCUMULATED into grads() (+=), scaled so that they are the
  // gradient of grad_scale · Σ losses (default: 1 / count, i.e. of this batch's mean loss).
  LossStats forward_backward(const Batch& batch, std::optional<double> grad_scale = std::nullopt);

  // Forward only. logits (B, T, V) are written when non-null; targets may be null when only logits
  // are wanted.
  LossStats forward(const Batch& batch, float* logits = nullptr);

 private:
  struct LayerActivations {
    AttentionInput input;  // attention norm output and statistics
    float* q;              // (N, Hq·D)  after RoPE
    float* k;              // (N, Hkv·D) after RoPE
    float* v;              // (N, Hkv·D)
    float* attn;           // (N, Hq·D)  attention output, before the output projection
    float* lse;            // (B, Hq, T)
    float* x_mid;          // (N, h)     residual stream after attention
    MlpActivations mlp;
  };

  // Layer `layer`'s attention of the batch being computed: its q, k, v, this batch's document ids.
  kernels::AttentionParams attention_params(int layer) const;
  void layer_forward(int layer);
  // On entry d_resid_ holds dL/dx_out of the layer; on exit dL/dx_in.
  void layer_backward(int layer);
  LossStats run(const Batch& batch, float* logits, bool backward, std::optional<double> grad_scale);

  ModelConfig config_;
  kernels::Backend& backend_;
  ParameterLayout layout_;
  ParameterBlock params_;
  ParameterBlock grads_;
  LayerMath math_;

  int B_ = 0;
  int64_t T_ = 0;
  const int32_t* doc_ids_ = nullptr;  // (B, T) of the batch being computed, or null
  Arena arena_;
  std::vector<float*> residual_;  // L + 1 of (N, h): residual_[l] is layer l's input
  std::vector<LayerActivations> layers_;
  std::vector<int64_t> positions_;     // (N) RoPE positions: the batch's, or 0..T−1 per sequence
  std::vector<int32_t> position_ids_;  // (N) learned position ids, the same
  AttentionInput final_norm_;          // (N, h) final norm output and statistics
  HeadScratch head_;
  // Backward scratch, reused by every layer.
  float* d_resid_ = nullptr;  // (N, h) gradient of the residual stream
  float* d_q_ = nullptr;      // (N, Hq·D)
  float* d_k_ = nullptr;      // (N, Hkv·D)
  float* d_v_ = nullptr;      // (N, Hkv·D)
  float* d_attn_ = nullptr;   // (N, Hq·D)
  LayerScratch scratch_{};
};

}  // namespace fpdt::model

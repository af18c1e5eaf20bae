// AdamW over a model's parameter block (PyTorch semantics, decoupled weight decay on matrices and
// embeddings only — norm weights and biases are not decayed), global gradient-norm clipping, and the
// warmup + cosine learning-rate schedule. The moments m and v share the parameters' layout, so a
// checkpoint stores them under the same internal names.
#pragma once

#include <cstdint>

#include "fpdt/kernels/backend.h"
#include "fpdt/model/parameters.h"

namespace fpdt::train {

struct OptimizerConfig {
  double lr = 3e-3;            // peak learning rate
  double min_lr = 3e-4;        // floor of the cosine decay
  int64_t warmup_steps = 0;    // linear warmup from lr/warmup to lr
  int64_t decay_steps = 0;     // cosine decay from the end of warmup to this step (0: constant lr)
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;      // max global gradient norm; 0 disables clipping
};

// Learning rate at optimizer step `step` (1-based): linear warmup over warmup_steps, then cosine
// from lr down to min_lr at decay_steps, min_lr after. decay_steps == 0 keeps lr constant after warmup.
double learning_rate(const OptimizerConfig& config, int64_t step);

class AdamW {
 public:
  AdamW(const model::ParameterLayout& layout, kernels::Backend& backend, const OptimizerConfig& config);

  // One update of `params` from `grads` with learning rate `lr`; advances step().
  void update(model::ParameterBlock& params, const model::ParameterBlock& grads, double lr);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  model::ParameterBlock& m() { return m_; }
  model::ParameterBlock& v() { return v_; }
  const OptimizerConfig& config() const { return config_; }

 private:
  const model::ParameterLayout& layout_;
  kernels::Backend& backend_;
  OptimizerConfig config_;
  model::ParameterBlock m_;
  model::ParameterBlock v_;
  int64_t step_ = 0;  // updates done so far
};

// Whether every value of the block is finite / at least zero (the padding between tensors is zero).
bool all_finite(const model::ParameterBlock& block);
bool all_at_least_zero(const model::ParameterBlock& block);

// ‖grads‖₂ over the whole block (float64 accumulation).
double global_grad_norm(kernels::Backend& backend, const model::ParameterBlock& grads);
// Scales grads so their global norm is at most max_norm (as torch.nn.utils.clip_grad_norm_:
// coefficient max_norm / (norm + 1e-6), applied only when below 1). Returns the norm before clipping.
double clip_grad_norm(kernels::Backend& backend, model::ParameterBlock& grads, double max_norm);

}  // namespace fpdt::train

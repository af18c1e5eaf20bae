// AdamW (PyTorch semantics, decoupled weight decay on matrices and embeddings only — norm weights and
// biases are not decayed), global gradient-norm clipping, and the warmup + cosine learning-rate
// schedule. The moments live in the model states (pipeline/model_states.h), whole or sharded by the
// ZeRO stage; this class holds the hyper-parameters and the update count and runs the update there.
#pragma once

#include <cstdint>

#include "fpdt/pipeline/model_states.h"

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
  explicit AdamW(const OptimizerConfig& config) : config_(config) {}

  // One update of the states' weights (this rank's part) from their gradients with learning rate
  // `lr`; advances step().
  void update(pipeline::ModelStates& states, double lr);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  const OptimizerConfig& config() const { return config_; }

 private:
  OptimizerConfig config_;
  int64_t step_ = 0;  // updates done so far
};

// Scales the gradients so their global norm is at most max_norm (as torch.nn.utils.clip_grad_norm_:
// coefficient max_norm / (norm + 1e-6), applied only when below 1). Returns the norm before clipping.
double clip_grad_norm(pipeline::ModelStates& states, double max_norm);

}  // namespace fpdt::train

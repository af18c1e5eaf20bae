// AdamW, gradient clipping and the learning-rate schedule (see optimizer.h).
#include "fpdt/train/optimizer.h"

#include <cmath>
#include <numbers>

namespace fpdt::train {

double learning_rate(const OptimizerConfig& config, int64_t step) {
  if (config.warmup_steps > 0 && step <= config.warmup_steps)
    return config.lr * static_cast<double>(step) / static_cast<double>(config.warmup_steps);
  if (config.decay_steps <= config.warmup_steps) return config.lr;
  if (step >= config.decay_steps) return config.min_lr;
  const double progress = static_cast<double>(step - config.warmup_steps) /
                          static_cast<double>(config.decay_steps - config.warmup_steps);
  return config.min_lr + 0.5 * (config.lr - config.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

void AdamW::update(pipeline::ModelStates& states, double lr) {
  ++step_;
  kernels::AdamWParams hyper;
  hyper.lr = lr;
  hyper.beta1 = config_.beta1;
  hyper.beta2 = config_.beta2;
  hyper.eps = config_.eps;
  hyper.weight_decay = config_.weight_decay;
  hyper.step = step_;
  states.adamw_update(hyper);
}

double clip_grad_norm(pipeline::ModelStates& states, double max_norm) {
  const double norm = states.gradient_norm();
  if (max_norm > 0.0) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1.0) states.scale_gradients(static_cast<float>(coefficient));
  }
  return norm;
}

}  // namespace fpdt::train

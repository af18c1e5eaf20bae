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

AdamW::AdamW(const model::ParameterLayout& layout, kernels::Backend& backend, const OptimizerConfig& config)
    : layout_(layout),
      backend_(backend),
      config_(config),
      m_(layout, "AdamW first moments"),
      v_(layout, "AdamW second moments") {}

void AdamW::update(model::ParameterBlock& params, const model::ParameterBlock& grads, double lr) {
  ++step_;
  kernels::AdamWParams hyper;
  hyper.lr = lr;
  hyper.beta1 = config_.beta1;
  hyper.beta2 = config_.beta2;
  hyper.eps = config_.eps;
  hyper.step = step_;
  for (const model::ParameterInfo& info : layout_.tensors()) {
    hyper.weight_decay = info.is_matrix() ? config_.weight_decay : 0.0;
    backend_.adamw_update(params.get(info.name), m_.get(info.name), v_.get(info.name), grads.get(info.name),
                          info.numel(), hyper);
  }
}

bool all_finite(const model::ParameterBlock& block) {
  const float* x = block.data();
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < block.numel(); ++i) bad |= !std::isfinite(x[i]);
  return bad == 0;
}

bool all_at_least_zero(const model::ParameterBlock& block) {
  const float* x = block.data();
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < block.numel(); ++i) bad |= !(x[i] >= 0.0f);
  return bad == 0;
}

double global_grad_norm(kernels::Backend& backend, const model::ParameterBlock& grads) {
  // Padding between tensors is zero (blocks are zeroed at creation and never written there).
  return std::sqrt(backend.sum_squares(grads.data(), grads.numel()));
}

double clip_grad_norm(kernels::Backend& backend, model::ParameterBlock& grads, double max_norm) {
  const double norm = global_grad_norm(backend, grads);
  if (max_norm > 0.0) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1.0) backend.scale_inplace(grads.data(), static_cast<float>(coefficient), grads.numel());
  }
  return norm;
}

}  // namespace fpdt::train

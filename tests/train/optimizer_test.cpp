// The optimizer over training: 5 AdamW steps of the pipeline (one chunk) on the golden models match
// PyTorch's losses, the learning-rate schedule has its documented shape, and clipping follows torch's
// clip_grad_norm_.
#include <gtest/gtest.h>

#include <cmath>

#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/train/optimizer.h"
#include "model/hf_golden.h"
#include "testing.h"

namespace fpdt::train {
namespace {

class AdamWParity : public ::testing::TestWithParam<std::string> {};

// tools/make_hf_golden.py records the loss before each of 5 torch.optim.AdamW steps of the
// transformers model in float64 (lr 1e-2 constant, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on
// tensors of rank ≥ 2, no clipping) on one batch.
TEST_P(AdamWParity, FiveStepsMatchPyTorch) {
  const testing::GoldenSet golden(GetParam());
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  auto local = comm::make_local();
  pipeline::FpdtModel model(golden.config, *backend, *local, pipeline::RunSpec{});  // one chunk
  golden.load(model.layout(), model.params());
  const std::vector<float> want = golden.golden.read_floats("golden.adamw_losses");
  const model::Batch& batch = golden.batch;

  OptimizerConfig settings;
  settings.lr = 1e-2;
  settings.beta1 = 0.9;
  settings.beta2 = 0.95;
  settings.eps = 1e-8;
  settings.weight_decay = 0.1;
  settings.grad_clip = 0.0;
  AdamW optimizer(settings);
  for (size_t step = 0; step < want.size(); ++step) {
    model.grads().zero();
    const double counted = model::counted_targets(batch.targets, batch.loss_mask, int64_t{batch.B} * batch.T);
    const double loss = model.forward_backward(batch, 1.0 / counted).mean();  // of the batch's mean loss
    // 1e-5 relative (the bar). Adam's update m/√v is insensitive to the fp32 rounding of
    // the gradients except in sign, so fp32 and float64 trajectories stay this close for 5 steps.
    EXPECT_NEAR(loss, want[step], 1e-5 * want[step]) << GetParam() << " before step " << step + 1;
    std::printf("[ error    ] %s before step %zu: loss %.6f vs %.6f (relative %.1e)\n", GetParam().c_str(), step + 1,
                loss, want[step], std::abs(loss - want[step]) / want[step]);
    optimizer.update(model.states(), learning_rate(settings, static_cast<int64_t>(step) + 1));
  }
  EXPECT_EQ(optimizer.step(), 5);
}

INSTANTIATE_TEST_SUITE_P(Golden, AdamWParity, ::testing::Values("grad_llama", "grad_qwen2", "grad_gpt2"));

TEST(LearningRate, WarmsUpLinearlyThenFollowsTheCosineToTheFloor) {
  OptimizerConfig config;
  config.lr = 1e-3;
  config.min_lr = 1e-4;
  config.warmup_steps = 10;
  config.decay_steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(config, 1), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(config, 10), 1e-3);
  EXPECT_NEAR(learning_rate(config, 60), 0.5 * (1e-3 + 1e-4), 1e-15);  // halfway down the cosine
  EXPECT_DOUBLE_EQ(learning_rate(config, 110), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(config, 500), 1e-4);
  for (int64_t step = 11; step < 110; ++step) EXPECT_LT(learning_rate(config, step + 1), learning_rate(config, step));
  config.decay_steps = 0;  // constant after warmup
  EXPECT_DOUBLE_EQ(learning_rate(config, 1000), 1e-3);
}

TEST(ClipGradNorm, ScalesLikeTorchOnlyAboveTheThreshold) {
  Rng rng(testing::fresh_seed());
  model::ModelConfig config = model::preset("llama-tiny");
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  auto local = comm::make_local();
  pipeline::ModelStates states(config, *backend, *local, pipeline::RunSpec{}, 1);
  model::ParameterBlock& grads = states.gradients();
  double sum = 0.0;
  for (const auto& info : states.layout().tensors())
    for (int64_t i = 0; i < info.numel(); ++i) {
      const float value = static_cast<float>(rng.normal());
      grads.get(info.name)[i] = value;
      sum += static_cast<double>(value) * value;
    }
  const double norm = std::sqrt(sum);
  // The norm is accumulated in float64: agreement to 1e-12 relative.
  EXPECT_NEAR(clip_grad_norm(states, 2 * norm), norm, 1e-12 * norm);
  EXPECT_NEAR(states.gradient_norm(), norm, 1e-12 * norm);  // untouched below the threshold
  EXPECT_NEAR(clip_grad_norm(states, 1.0), norm, 1e-12 * norm);
  // After clipping: norm · 1/(norm + 1e-6) ≈ 1, up to fp32 rounding of the scaled values.
  EXPECT_NEAR(states.gradient_norm(), 1.0, 1e-6);
}

}  // namespace
}  // namespace fpdt::train

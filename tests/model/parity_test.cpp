// PyTorch parity of the gradients: the engine's logits, loss and every parameter gradient against
// the small golden sets of tools/make_hf_golden.py (grad_llama: GQA, untied; grad_qwen2: q/k/v
// biases, GQA 4:1, tied, a window of 8 on layer 1; grad_gpt2: both attention-scaling flags) —
// transformers' model in float64 on the saved F32 weights. Each set on the `cpu` and `reference`
// backends.
#include <gtest/gtest.h>

#include <string>

#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/run_spec.h"
#include "hf_golden.h"
#include "testing.h"

namespace fpdt::model {
namespace {

struct GoldenCase {
  std::string set;
  std::string backend;  // "cpu" or "reference"
  friend std::ostream& operator<<(std::ostream& out, const GoldenCase& c) { return out << c.set << " on " << c.backend; }
};

class Parity : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Parity, LogitsLossAndGradientsMatchPyTorch) {
  const GoldenCase& c = GetParam();
  const testing::GoldenSet golden(c.set);
  auto backend = kernels::make_backend(pipeline::parse_backend(c.backend));
  Transformer model(golden.config, *backend);
  golden.load(model.layout(), model.params());

  // Against transformers in float64 on the same F32 weights (it takes RoPE angles in float32 even then:
  // ~1e-7 on the angle, below our own rounding): only our fp32 side rounds, in our order.
  const int64_t tokens = golden.batch.B * golden.batch.T;
  const double count = counted_targets(golden.batch.targets, nullptr, tokens);
  const double logits_bound =
      testing::fp32_bound(testing::transformer_reordering(golden.config, tokens, golden.batch.T, false, testing::Against::float64));
  const double loss_bound = testing::fp32_bound(
      testing::transformer_loss_reordering(golden.config, tokens, golden.batch.T, count, testing::Against::float64));
  const double grad_bound =
      testing::fp32_bound(testing::transformer_reordering(golden.config, tokens, golden.batch.T, true, testing::Against::float64));
  std::vector<float> logits(golden.logits.size());
  const LossStats forward_stats = model.forward(golden.batch, logits.data());
  const double logits_error = testing::relative_error(logits, golden.logits);
  EXPECT_LE(logits_error, logits_bound) << c.set << " logits";
  const double loss_error = std::abs(forward_stats.mean() - golden.loss) / golden.loss;
  EXPECT_LE(loss_error, loss_bound) << c.set << " loss";

  // Backward: every gradient, tensor by tensor.
  model.grads().zero();
  const LossStats stats = model.forward_backward(golden.batch);
  EXPECT_LE(std::abs(stats.mean() - golden.loss) / golden.loss, loss_bound) << c.set << " loss (training)";
  ParameterBlock want_grads(model.layout(), "golden gradients");
  load_hf_safetensors(golden.config, model.layout(), want_grads, golden.dir + "/golden.safetensors", "grad.");
  double worst_gradient = 0.0;
  for (const ParameterInfo& info : model.layout().tensors()) {
    const double error = testing::relative_error(model.grads().get(info.name), want_grads.get(info.name),
                                                 static_cast<size_t>(info.numel()));
    EXPECT_LE(error, grad_bound) << c.set << " gradient of " << info.name;
    worst_gradient = std::max(worst_gradient, error);
  }
  std::printf("[ error    ] %s on %s: logits %.2e (bound %.2e), loss %.2e (bound %.2e), worst gradient %.2e (bound %.2e)\n",
              c.set.c_str(), c.backend.c_str(), logits_error, logits_bound, loss_error, loss_bound, worst_gradient,
              grad_bound);
}

INSTANTIATE_TEST_SUITE_P(Golden, Parity,
                         ::testing::Values(GoldenCase{"grad_llama", "cpu"}, GoldenCase{"grad_qwen2", "cpu"},
                                           GoldenCase{"grad_gpt2", "cpu"}, GoldenCase{"grad_llama", "reference"},
                                           GoldenCase{"grad_qwen2", "reference"}, GoldenCase{"grad_gpt2", "reference"}),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return info.param.set + "_" + info.param.backend;
                         });

}  // namespace
}  // namespace fpdt::model

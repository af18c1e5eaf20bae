// PyTorch parity: the engine's logits, loss and every parameter gradient against golden files written
// by tools/make_golden.py (a float64 PyTorch model on the same weights, saved as F32). Runs each
// golden model on the fast `cpu` backend and on the `reference` backend.
#include <gtest/gtest.h>

#include <string>

#include "fpdt/kernels/backend.h"
#include "fpdt/model/config.h"
#include "fpdt/model/parameters.h"
#include "fpdt/model/transformer.h"
#include "fpdt/tensor/safetensors.h"
#include "testing.h"

namespace fpdt::model {
namespace {

struct GoldenCase {
  std::string model;    // folder under tests/golden
  std::string backend;  // "cpu" or "reference"
};

std::string golden_dir(const std::string& model) { return std::string(FPDT_SOURCE_DIR) + "/tests/golden/" + model; }

class Parity : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Parity, LogitsLossAndGradientsMatchPyTorch) {
  const GoldenCase& c = GetParam();
  const std::string dir = golden_dir(c.model);
  const ModelConfig config = load_hf_config(dir + "/config.json");
  auto backend = kernels::make_backend(c.backend);
  Transformer model(config, *backend);
  const std::string golden_path = dir + "/golden.safetensors";
  load_hf_safetensors(config, model.layout(), model.params(), golden_path);

  SafetensorsReader golden(golden_path);
  const SafetensorsEntry& ids_entry = golden.entry("golden.input_ids");
  const std::vector<int32_t> tokens = golden.read_ints("golden.input_ids");
  const std::vector<int32_t> targets = golden.read_ints("golden.targets");
  Batch batch;
  batch.B = static_cast<int>(ids_entry.shape[0]);
  batch.T = ids_entry.shape[1];
  batch.tokens = tokens.data();
  batch.targets = targets.data();

  // Forward: logits and loss. Tolerance 1e-5 relative (the bar): the golden values are
  // float64 results on the same F32 weights, and our fp32 forward accumulates rounding of order
  // 1e-7 per op over a few dozen ops.
  const std::vector<float> want_logits = golden.read_floats("golden.logits");
  std::vector<float> logits(want_logits.size());
  const LossStats forward_stats = model.forward(batch, logits.data());
  const double logits_error = testing::relative_error(logits, want_logits);
  EXPECT_LE(logits_error, 1e-5) << c.model << " logits";
  const double want_loss = golden.read_floats("golden.loss")[0];
  const double loss_error = std::abs(forward_stats.mean() - want_loss) / want_loss;
  EXPECT_LE(loss_error, 1e-5) << c.model << " loss";

  // Backward: every gradient, tensor by tensor in Hugging Face naming, ≤ 1e-4 relative (the issue's
  // bar): backward chains twice as many fp32 ops, with cancellation in the softmax gradients.
  model.grads().zero();
  const LossStats stats = model.forward_backward(batch);
  EXPECT_LE(std::abs(stats.mean() - want_loss) / want_loss, 1e-5) << c.model << " loss (training)";
  ParameterBlock want_grads(model.layout(), "golden gradients");
  load_hf_safetensors(config, model.layout(), want_grads, golden_path, "grad.");
  double worst_gradient = 0.0;
  for (const ParameterInfo& info : model.layout().tensors()) {
    const double error = testing::relative_error(model.grads().get(info.name), want_grads.get(info.name),
                                                 static_cast<size_t>(info.numel()));
    EXPECT_LE(error, 1e-4) << c.model << " gradient of " << info.name;
    worst_gradient = std::max(worst_gradient, error);
  }
  std::printf("[ error    ] %s on %s: logits %.2e, loss %.2e, worst gradient %.2e\n", c.model.c_str(),
              c.backend.c_str(), logits_error, loss_error, worst_gradient);
}

INSTANTIATE_TEST_SUITE_P(Golden, Parity,
                         ::testing::Values(GoldenCase{"llama_gqa", "cpu"}, GoldenCase{"llama_tied_partial", "cpu"},
                                           GoldenCase{"gpt2", "cpu"}, GoldenCase{"llama_gqa", "reference"},
                                           GoldenCase{"llama_tied_partial", "reference"},
                                           GoldenCase{"gpt2", "reference"}),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return info.param.model + "_" + info.param.backend;
                         });

}  // namespace
}  // namespace fpdt::model

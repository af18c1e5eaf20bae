// The model beyond the golden files: fast and reference backends agree on fresh random weights and
// data (Llama and GPT, B = 2), gradients accumulate, Hugging Face checkpoints round-trip, and bad
// input or a too-small compute budget gets one clear error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "fpdt/base/error.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/ops.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/model/transformer.h"
#include "testing.h"

namespace fpdt::model {
namespace {

ModelConfig tiny(Family family) {
  ModelConfig config = preset(family == Family::llama ? "llama-tiny" : "gpt-tiny");
  config.vocab_size = 67;
  config.layers = 2;
  return config;
}

struct RandomBatch {
  std::vector<int32_t> tokens, targets;
  std::vector<float> mask;
  Batch batch;
  RandomBatch(Rng& rng, int B, int64_t T, int V, bool with_mask) {
    for (int64_t n = 0; n < B * T; ++n) {
      tokens.push_back(static_cast<int32_t>(rng.below(V)));
      targets.push_back(rng.uniform() < 0.15 ? kernels::kIgnoreIndex : static_cast<int32_t>(rng.below(V)));
      mask.push_back(static_cast<float>(rng.uniform(0.0, 1.0)));
    }
    batch = Batch{B, T, tokens.data(), targets.data(), with_mask ? mask.data() : nullptr};
  }
};

class BackendAgreement : public ::testing::TestWithParam<Family> {};

TEST_P(BackendAgreement, FastAndReferenceBackendsGiveTheSameLossAndGradients) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const ModelConfig config = tiny(GetParam());
  auto cpu = kernels::make_backend(kernels::BackendKind::cpu);
  auto reference = kernels::make_backend(kernels::BackendKind::reference);
  Transformer fast(config, *cpu, seed);
  Transformer slow(config, *reference, seed);
  RandomBatch data(rng, 2, 29, config.vocab_size, true);
  const LossStats a = fast.forward_backward(data.batch);
  const LossStats b = slow.forward_backward(data.batch);
  // Same maths in fp32 with different summation orders (the reference backend rounds each kernel's
  // outputs to fp32 too): bounded by what the model's sums are.
  const int64_t tokens = data.batch.B * data.batch.T;
  const double loss_bound = testing::fp32_bound(testing::transformer_loss_reordering(config, tokens, data.batch.T, b.count));
  const double grad_bound = testing::fp32_bound(testing::transformer_reordering(config, tokens, data.batch.T, true));
  EXPECT_NEAR(a.mean(), b.mean(), loss_bound * b.mean());
  EXPECT_DOUBLE_EQ(a.count, b.count);
  double worst_gradient = 0.0;
  for (const ParameterInfo& info : fast.layout().tensors()) {
    const double error = testing::relative_error(fast.grads().get(info.name), slow.grads().get(info.name),
                                                 static_cast<size_t>(info.numel()));
    EXPECT_LE(error, grad_bound) << info.name;
    worst_gradient = std::max(worst_gradient, error);
  }
  std::printf("[ error    ] loss %.2e (bound %.2e), worst gradient %.2e (bound %.2e)\n",
              std::abs(a.mean() - b.mean()) / b.mean(), loss_bound, worst_gradient, grad_bound);
}

// bf16 (layer.h: the GEMMs' and attention's inputs rounded, the kept activations bf16) against fp32 on the
// same weights and data: the loss and the gradients within what bf16's roundings in a row give
// (tests/tolerances.h bf16_bound, one side rounding); and the cpu backend's bf16 against the reference's
// (both round the same values; their fp32 sums differ in order, which moves some across a bf16 boundary).
TEST_P(BackendAgreement, Bf16IsFp32WithinBf16Rounding) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const ModelConfig config = tiny(GetParam());
  auto cpu = kernels::make_backend(kernels::BackendKind::cpu);
  auto reference = kernels::make_backend(kernels::BackendKind::reference);
  Transformer fp32(config, *cpu, seed);
  Transformer bf16(config, *cpu, seed, kernels::Precision::bf16);
  Transformer bf16_reference(config, *reference, seed, kernels::Precision::bf16);
  RandomBatch data(rng, 2, 29, config.vocab_size, true);
  const LossStats want = fp32.forward_backward(data.batch);
  const LossStats got = bf16.forward_backward(data.batch);
  const LossStats spec = bf16_reference.forward_backward(data.batch);
  EXPECT_DOUBLE_EQ(got.count, want.count);
  const double loss_bound = testing::bf16_bound(testing::bf16_roundings(config, false), false);
  const double grad_bound = testing::bf16_bound(testing::bf16_roundings(config, true), false);
  const double loss_error = std::abs(got.mean() - want.mean()) / want.mean();
  const size_t n = static_cast<size_t>(fp32.grads().numel());
  const double grad_error = testing::relative_error(bf16.grads().data(), fp32.grads().data(), n);
  EXPECT_GT(grad_error, 0.0) << "bf16 computed as fp32";
  EXPECT_LE(loss_error, loss_bound);
  EXPECT_LE(grad_error, grad_bound);
  const double spec_loss_bound = testing::bf16_bound(testing::bf16_roundings(config, false), true, spec.count);
  const double spec_grad_bound = testing::bf16_bound(testing::bf16_roundings(config, true), true);
  const double spec_loss_error = std::abs(got.mean() - spec.mean()) / spec.mean();
  const double spec_grad_error = testing::relative_error(bf16.grads().data(), bf16_reference.grads().data(), n);
  EXPECT_LE(spec_loss_error, spec_loss_bound);
  EXPECT_LE(spec_grad_error, spec_grad_bound);
  std::printf("[ error    ] bf16 vs fp32: loss %.2e (bound %.2e), gradients %.2e (bound %.2e); cpu vs reference bf16: "
              "loss %.2e (bound %.2e), gradients %.2e (bound %.2e)\n",
              loss_error, loss_bound, grad_error, grad_bound, spec_loss_error, spec_loss_bound, spec_grad_error,
              spec_grad_bound);
}

INSTANTIATE_TEST_SUITE_P(Families, BackendAgreement, ::testing::Values(Family::llama, Family::gpt),
                         [](const auto& info) { return info.param == Family::llama ? "llama" : "gpt"; });

TEST(Transformer, GradientsAccumulateAcrossCalls) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  auto cpu = kernels::make_backend(kernels::BackendKind::cpu);
  Transformer model(tiny(Family::llama), *cpu, seed);
  RandomBatch data(rng, 1, 16, 67, false);
  model.forward_backward(data.batch);
  std::vector<float> once(model.grads().data(), model.grads().data() + model.grads().numel());
  model.forward_backward(data.batch);
  std::vector<float> doubled(once);
  for (float& value : doubled) value *= 2.0f;
  // Identical second pass added onto the first: exact up to one rounding of the sum.
  EXPECT_LE(testing::relative_error(model.grads().data(), doubled.data(), doubled.size()), 1e-7);
}

TEST(Transformer, HuggingFaceCheckpointRoundTripsBitwise) {
  const uint64_t seed = testing::fresh_seed();
  const auto dir = std::filesystem::temp_directory_path() / ("fpdt_ckpt_" + std::to_string(seed));
  std::filesystem::create_directories(dir);
  auto cpu = kernels::make_backend(kernels::BackendKind::cpu);
  for (Family family : {Family::llama, Family::gpt}) {
    ModelConfig config = tiny(family);
    config.tie_embeddings = family == Family::gpt;
    Transformer saved(config, *cpu, seed);
    Transformer loaded(config, *cpu, seed + 1);
    const std::string path = (dir / "model.safetensors").string();
    save_hf_safetensors(config, saved.layout(), saved.params(), path);
    load_hf_safetensors(config, loaded.layout(), loaded.params(), path);
    EXPECT_EQ(0, std::memcmp(saved.params().data(), loaded.params().data(),
                             sizeof(float) * static_cast<size_t>(saved.params().numel())));
  }
  std::filesystem::remove_all(dir);
}

TEST(Transformer, OutOfVocabularyTokenIsAClearError) {
  auto cpu = kernels::make_backend(kernels::BackendKind::cpu);
  Transformer model(tiny(Family::llama), *cpu);
  std::vector<int32_t> tokens = {1, 2, 99}, targets = {2, 3, 4};
  try {
    model.forward_backward(Batch{1, 3, tokens.data(), targets.data(), nullptr});
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("token id 99 at sequence 0 position 2"), std::string::npos)
        << error.what();
  }
}

TEST(Transformer, TooSmallComputeBudgetIsAClearError) {
  auto cpu = kernels::make_backend(kernels::BackendKind::cpu);
  Transformer model(tiny(Family::llama), *cpu);
  const size_t live = MemoryTiers::instance().usage(Tier::compute).active_bytes;
  MemoryTiers::instance().set_limit(Tier::compute, live + (1u << 20));
  std::vector<int32_t> tokens(4096, 1);
  std::string message;
  try {
    model.forward_backward(Batch{1, 4096, tokens.data(), tokens.data(), nullptr});
  } catch (const Error& error) {
    message = error.what();
  }
  MemoryTiers::instance().set_limit(Tier::compute, SIZE_MAX);
  EXPECT_NE(message.find("compute tier: cannot allocate"), std::string::npos) << message;
  EXPECT_NE(message.find("activations for 1 x 4096 tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("hint:"), std::string::npos) << message;
}

TEST(Transformer, GptRefusesSequencesPastItsPositionTable) {
  auto cpu = kernels::make_backend(kernels::BackendKind::cpu);
  ModelConfig config = tiny(Family::gpt);
  config.max_positions = 8;
  Transformer model(config, *cpu);
  std::vector<int32_t> tokens(9, 1);
  EXPECT_THROW(model.forward(Batch{1, 9, tokens.data(), tokens.data(), nullptr}), Error);
}

}  // namespace
}  // namespace fpdt::model

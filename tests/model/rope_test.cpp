// RoPE frequencies of a model (model/rope.h): the default table is θ^(−2i / rotary_dim), with
// partial rotary and any θ; models without RoPE get none; the table drives the kernels to the
// rotation by pos · θ^(−2i / rotary_dim) that the default RoPE defines; and the context-extension
// variants (linear, llama3, yarn with every option) equal transformers 5.24's own tables
// (tests/golden/rope_tables.safetensors from tools/make_hf_golden.py); dynamic is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <cstdint>
#include <vector>

#include "fpdt/kernels/reference/rope.h"
#include "fpdt/model/config.h"
#include "fpdt/model/rope.h"
#include "fpdt/tensor/safetensors.h"
#include "testing.h"

namespace fpdt::model {
namespace {

TEST(RopeFrequencies, DefaultTableIsPowersOfTheta) {
  ModelConfig config = preset("llama3-8b");  // θ = 500000, head dim 128
  ASSERT_EQ(config.rope_theta, 500000.0);
  const RopeFrequencies rope = rope_frequencies(config);
  ASSERT_EQ(rope.inv_freq.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(rope.inv_freq[i], std::pow(500000.0, -2.0 * i / 128)) << i;  // bitwise
  EXPECT_EQ(rope.inv_freq[0], 1.0);
  EXPECT_EQ(rope.attention_scaling, 1.0);
  const kernels::RopeParams params = rope.params();
  EXPECT_EQ(params.inv_freq, rope.inv_freq.data());
  EXPECT_EQ(params.rotary_dim, 128);
  EXPECT_EQ(params.attention_scaling, 1.0);
}

TEST(RopeFrequencies, PartialRotaryAndOtherTheta) {
  ModelConfig config = preset("llama-tiny");
  config.rope_theta = 1000.0;
  config.rotary_dim = config.head_dim / 2;  // 8 of 16
  const RopeFrequencies rope = rope_frequencies(config);
  ASSERT_EQ(rope.inv_freq.size(), 4u);
  // 1000^(−2i/8) = 1, 1000^(−1/4), 1000^(−1/2), 1000^(−3/4)
  EXPECT_EQ(rope.inv_freq[0], 1.0);
  EXPECT_NEAR(rope.inv_freq[2], 1.0 / std::sqrt(1000.0), 1e-16);
  EXPECT_EQ(rope.params().rotary_dim, 8);
}

TEST(RopeFrequencies, NoneForLearnedPositions) {
  const RopeFrequencies rope = rope_frequencies(preset("gpt-tiny"));
  EXPECT_TRUE(rope.inv_freq.empty());
  EXPECT_EQ(rope.params().rotary_dim, 0);
}

// The default table through the reference kernel gives the rotation the old θ-form defined: pair i
// at position p turns by p · θ^(−2i/d), computed here by hand in float64.
TEST(RopeFrequencies, TableRotatesByTheDefaultAngles) {
  ModelConfig config = preset("llama-tiny");
  const int D = config.head_dim, half = config.rotary_dim / 2;
  const RopeFrequencies rope = rope_frequencies(config);
  const int64_t pos[1] = {123457};
  std::vector<double> x(D);
  for (int d = 0; d < D; ++d) x[d] = 0.25 * d - 1.0;
  std::vector<double> y = x;
  kernels::reference::rope_forward(y.data(), pos, 1, 1, D, rope.params());
  for (int i = 0; i < half; ++i) {
    const double angle = 123457.0 * std::pow(config.rope_theta, -2.0 * i / config.rotary_dim);
    const double a = x[i], b = x[i + half];
    // The same float64 operations, equal but for a possible FMA contraction (one rounding, ~1e-16).
    EXPECT_NEAR(y[i], a * std::cos(angle) - b * std::sin(angle), 1e-15) << i;
    EXPECT_NEAR(y[i + half], b * std::cos(angle) + a * std::sin(angle), 1e-15) << i;
  }
}

TEST(RopeScaling, FrequencyTablesAndAttentionScalingEqualTransformers) {
  const SafetensorsReader tables(std::string(FPDT_SOURCE_DIR) + "/tests/golden/rope_tables.safetensors");
  const nlohmann::json cases = nlohmann::json::parse(tables.metadata("cases"));
  ASSERT_GE(cases.size(), 10u);
  for (const auto& [name, c] : cases.items()) {
    SCOPED_TRACE(name);
    const int head_dim = c["head_dim"].get<int>();
    const nlohmann::json config_json = {{"model_type", "llama"}, {"vocab_size", 10}, {"hidden_size", 4 * head_dim},
                                        {"intermediate_size", 8}, {"num_hidden_layers", 1}, {"num_attention_heads", 4},
                                        {"head_dim", head_dim}, {"max_position_embeddings", c["max_position_embeddings"]},
                                        {"rope_parameters", c["rope_parameters"]}};
    const RopeFrequencies rope = rope_frequencies(parse_hf_config(config_json.dump(), name));
    const std::vector<float> want = tables.read_floats(name + ".inv_freq");
    ASSERT_EQ(rope.inv_freq.size(), want.size());
    // transformers builds the table in float32: the exponent 2i/D rounded (≤ 6e-8 relative) times
    // ln θ (≤ 14 for θ = 1e6) plus the pow/division roundings bound it to ≤ 1e-6 relative per entry
    // (3e-7 measured); ours is the same formula in float64.
    double worst = 0.0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(rope.inv_freq[i] - want[i]) / want[i]);
    EXPECT_LE(worst, 1e-6);
    // The attention scaling is computed in Python floats (float64) by transformers.
    EXPECT_NEAR(rope.attention_scaling, c["attention_scaling"].get<double>(), 1e-12);
    std::printf("[ error    ] %-26s worst entry %.1e, attention scaling %.6f\n", name.c_str(), worst, rope.attention_scaling);
  }
}

TEST(RopeScaling, DynamicIsRefusedForTraining) {
  const std::string json = R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 16, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "rope_scaling": {"type": "dynamic", "factor": 2.0}})";
  const ModelConfig config = parse_hf_config(json, "dynamic.json");
  testing::expect_contains(testing::error_message([&] { rope_frequencies(config); }), {"[model]", "rope_type dynamic"});
}

}  // namespace
}  // namespace fpdt::model

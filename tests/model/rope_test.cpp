// RoPE frequencies of a model (model/rope.h): the default table is θ^(−2i / rotary_dim), with
// partial rotary and any θ; models without RoPE get none; and the table drives the kernels to the
// rotation by pos · θ^(−2i / rotary_dim) that the default RoPE defines.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "fpdt/kernels/reference/rope.h"
#include "fpdt/model/config.h"
#include "fpdt/model/rope.h"

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

}  // namespace
}  // namespace fpdt::model

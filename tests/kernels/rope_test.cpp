// RoPE from a frequency table: the reference against hand values (the table's angles, attention
// scaling), its own inverse, finite differences (with scaling and an arbitrary table) and
// partial-rotary pass-through (bitwise on cpu too). (Every backend against the reference, positions
// up to 2e6: backend_ops_test.cpp; the default table of a model: tests/model/rope_test.cpp.)
#include <cmath>
#include <cstdint>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/reference/rope.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::fresh_seed;
using testing::random_normal;
using testing::relative_error;

std::vector<int64_t> random_positions(Rng& rng, int64_t N, int64_t max_pos) {
  std::vector<int64_t> pos(N);
  for (auto& p : pos) p = static_cast<int64_t>(rng.below(static_cast<uint64_t>(max_pos) + 1));
  return pos;
}

// theta^(−2i / rotary_dim), i < rotary_dim / 2: the default table.
std::vector<double> theta_table(double theta, int rotary_dim) {
  std::vector<double> inv_freq(rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i) inv_freq[i] = std::pow(theta, -2.0 * i / rotary_dim);
  return inv_freq;
}

TEST(RopeReference, HandValues) {
  // pos = 1, D = rotary_dim = 2, inv_freq = {1}: the only pair turns by 1 rad.
  const int64_t pos[1] = {1};
  const double one[1] = {1.0};
  double x[2] = {1.0, 0.0};
  reference::rope_forward(x, pos, 1, 1, 2, RopeParams{one, 1.0, 2});
  // Both sides are cos/sin of the same double; only the rounding of a·c − b·s (with b = 0) remains.
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-15);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-15);

  // The second pair of a D = 4 head with the table {1, 0.1} (θ = 100) turns by 2 · 0.1 = 0.2 rad.
  const int64_t pos2[1] = {2};
  const auto table = theta_table(100.0, 4);
  EXPECT_DOUBLE_EQ(table[1], 0.1);
  double y[4] = {0.0, 0.0, 0.0, 1.0};  // pairs (0, 2) and (1, 3); (a, b) = (0, 1) for i = 1
  reference::rope_forward(y, pos2, 1, 1, 4, RopeParams{table.data(), 1.0, 4});
  // (a, b) = (0, 1) → (−sin 0.2, cos 0.2); double-rounding only, as above.
  EXPECT_NEAR(y[1], -std::sin(0.2), 1e-15);
  EXPECT_NEAR(y[3], std::cos(0.2), 1e-15);
  // Pair i = 0 rotates (0, 0) and stays exactly zero.
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[2], 0.0);

  // attention_scaling multiplies cos and sin: (1, 0) at 1 rad → 1.5 · (cos 1, sin 1).
  double z[2] = {1.0, 0.0};
  reference::rope_forward(z, pos, 1, 1, 2, RopeParams{one, 1.5, 2});
  EXPECT_NEAR(z[0], 1.5 * std::cos(1.0), 1e-15);
  EXPECT_NEAR(z[1], 1.5 * std::sin(1.0), 1e-15);
}

TEST(RopeReference, BackwardInvertsForward) {
  Rng rng(fresh_seed());
  const int64_t N = 5;
  const int H = 3, D = 10, rotary_dim = 8;
  const auto pos = random_positions(rng, N, 1'000'000);
  const auto x = random_normal<double>(rng, N * H * D);
  const auto table = theta_table(10000.0, rotary_dim);
  for (const double scaling : {1.0, 1.25}) {
    auto y = x;
    reference::rope_forward(y.data(), pos.data(), N, H, D, RopeParams{table.data(), scaling, rotary_dim});
    reference::rope_backward(y.data(), pos.data(), N, H, D, RopeParams{table.data(), scaling, rotary_dim});
    // s·R is orthogonal up to s, so backward (its transpose) after forward is s² on the rotated dims
    // and the identity on the others, up to a few double roundings.
    auto want = x;
    for (int64_t row = 0; row < N * H; ++row)
      for (int d = 0; d < rotary_dim; ++d) want[row * D + d] *= scaling * scaling;
    const double round_trip_error = relative_error(y, want);
    EXPECT_LE(round_trip_error, 1e-14) << "scaling " << scaling;
    std::printf("[ errors   ] rope reference round trip (scaling %g): %.3g\n", scaling, round_trip_error);
  }
}

TEST(RopeReference, PartialRotaryLeavesTailUntouched) {
  Rng rng(fresh_seed());
  const int64_t N = 4;
  const int H = 2, D = 12, rotary_dim = 6;
  const auto pos = random_positions(rng, N, 4096);
  const auto x = random_normal<double>(rng, N * H * D);
  const auto table = theta_table(10000.0, rotary_dim);
  const RopeParams rope{table.data(), 1.0, rotary_dim};
  auto y_ref = x;
  reference::rope_forward(y_ref.data(), pos.data(), N, H, D, rope);
  std::vector<float> y_fast(x.begin(), x.end());
  const std::vector<float> x_float = y_fast;
  cpu::CpuBackend().rope_forward(y_fast.data(), pos.data(), N, H, D, rope);
  bool head_changed = false;
  for (int64_t row = 0; row < N * H; ++row) {
    for (int d = rotary_dim; d < D; ++d) {
      // Pass-through dims are copied, not computed: bitwise equal.
      EXPECT_EQ(y_ref[row * D + d], x[row * D + d]);
      EXPECT_EQ(y_fast[row * D + d], x_float[row * D + d]);
    }
    for (int d = 0; d < rotary_dim; ++d) head_changed |= y_ref[row * D + d] != x[row * D + d];
  }
  EXPECT_TRUE(head_changed);
}

// loss(x) = Σ w ∘ rope_forward(x); its gradient is rope_backward(w). With attention scaling and an
// arbitrary table (not a power series), so the backward is checked as the transpose of what the
// forward does with any RopeParams.
TEST(RopeReference, BackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const int64_t N = 3;
  const int H = 2, D = 8, rotary_dim = 6;
  const auto pos = random_positions(rng, N, 50);
  const auto x = random_normal<double>(rng, N * H * D);
  const auto w = random_normal<double>(rng, N * H * D);
  std::vector<double> table(rotary_dim / 2);
  for (auto& f : table) f = rng.uniform(0.01, 1.0);
  const RopeParams rope{table.data(), 0.9, rotary_dim};

  auto loss = [&](const std::vector<double>& input) {
    auto y = input;
    reference::rope_forward(y.data(), pos.data(), N, H, D, rope);
    double sum = 0.0;
    for (size_t i = 0; i < y.size(); ++i) sum += w[i] * y[i];
    return sum;
  };
  auto grad = w;
  reference::rope_backward(grad.data(), pos.data(), N, H, D, rope);

  std::vector<double> numeric(x.size());
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    auto plus = x, minus = x;
    plus[i] += h;
    minus[i] -= h;
    numeric[i] = (loss(plus) - loss(minus)) / (2 * h);
  }
  // The loss is linear in x, so central differences have no truncation error; what remains is
  // cancellation, ≈ 1e-16 · |loss| / h ≈ 1e-9 per entry.
  const double error = relative_error(grad, numeric);
  EXPECT_LE(error, 1e-8);
  std::printf("[ errors   ] rope reference vs finite differences: %.3g\n", error);
}

}  // namespace
}  // namespace fpdt::kernels

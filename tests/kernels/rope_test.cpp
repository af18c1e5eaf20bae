// RoPE: the reference against a hand value, its own inverse, finite differences and partial-rotary
// pass-through; the fast CPU kernel against the reference (in double) at positions up to 1e6.
#include <cmath>
#include <cstdint>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/kernels/cpu/kernels.h"
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

TEST(RopeReference, HandValueOneRadian) {
  // pos = 1, D = rotary_dim = 2: the only pair is i = 0, angle = 1 · theta^0 = 1 rad.
  const int64_t pos[1] = {1};
  double x[2] = {1.0, 0.0};
  reference::rope_forward(x, pos, 1, 1, 2, 2, 10000.0);
  // Both sides are cos/sin of the same double; only the rounding of a·c − b·s (with b = 0) remains.
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-15);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-15);

  // The second pair of a D = 4 head has angle pos · theta^(−2/4) = 2 · 100^(−1/2) = 0.2 rad with theta = 100.
  const int64_t pos2[1] = {2};
  double y[4] = {0.0, 0.0, 0.0, 1.0};  // pairs (0, 2) and (1, 3); (a, b) = (0, 1) for i = 1
  reference::rope_forward(y, pos2, 1, 1, 4, 4, 100.0);
  // (a, b) = (0, 1) → (−sin 0.2, cos 0.2); double-rounding only, as above.
  EXPECT_NEAR(y[1], -std::sin(0.2), 1e-15);
  EXPECT_NEAR(y[3], std::cos(0.2), 1e-15);
  // Pair i = 0 rotates (0, 0) and stays exactly zero.
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[2], 0.0);
}

TEST(RopeReference, BackwardInvertsForward) {
  Rng rng(fresh_seed());
  const int64_t N = 5;
  const int H = 3, D = 10, rotary_dim = 8;
  const auto pos = random_positions(rng, N, 1'000'000);
  const auto x = random_normal<double>(rng, N * H * D);
  auto y = x;
  reference::rope_forward(y.data(), pos.data(), N, H, D, rotary_dim, 10000.0);
  reference::rope_backward(y.data(), pos.data(), N, H, D, rotary_dim, 10000.0);
  // The rotation is orthogonal, so backward (its transpose) undoes forward up to a few double roundings.
  const double round_trip_error = relative_error(y, x);
  EXPECT_LE(round_trip_error, 1e-14);
  std::printf("[ errors   ] rope reference round trip: %.3g\n", round_trip_error);
}

TEST(RopeReference, PartialRotaryLeavesTailUntouched) {
  Rng rng(fresh_seed());
  const int64_t N = 4;
  const int H = 2, D = 12, rotary_dim = 6;
  const auto pos = random_positions(rng, N, 4096);
  const auto x = random_normal<double>(rng, N * H * D);
  auto y_ref = x;
  reference::rope_forward(y_ref.data(), pos.data(), N, H, D, rotary_dim, 10000.0);
  std::vector<float> y_fast(x.begin(), x.end());
  const std::vector<float> x_float = y_fast;
  cpu::rope_forward(y_fast.data(), pos.data(), N, H, D, rotary_dim, 10000.0);
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

// loss(x) = Σ w ∘ rope_forward(x); its gradient is rope_backward(w).
TEST(RopeReference, BackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const int64_t N = 3;
  const int H = 2, D = 8, rotary_dim = 6;
  const double theta = 500.0;
  const auto pos = random_positions(rng, N, 50);
  const auto x = random_normal<double>(rng, N * H * D);
  const auto w = random_normal<double>(rng, N * H * D);

  auto loss = [&](const std::vector<double>& input) {
    auto y = input;
    reference::rope_forward(y.data(), pos.data(), N, H, D, rotary_dim, theta);
    double sum = 0.0;
    for (size_t i = 0; i < y.size(); ++i) sum += w[i] * y[i];
    return sum;
  };
  auto grad = w;
  reference::rope_backward(grad.data(), pos.data(), N, H, D, rotary_dim, theta);

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

TEST(RopeCpu, MatchesReferenceAtLongPositions) {
  Rng rng(fresh_seed());
  const int64_t N = 37;
  const int H = 3, D = 24, rotary_dim = 16;
  const double theta = 10000.0;
  auto pos = random_positions(rng, N, 1'000'000);
  pos[0] = 1'000'000;  // the largest position always present
  const auto x = random_normal<float>(rng, N * H * D);
  const std::vector<double> x_double(x.begin(), x.end());

  auto want = x_double;
  reference::rope_forward(want.data(), pos.data(), N, H, D, rotary_dim, theta);
  auto got = x;
  cpu::rope_forward(got.data(), pos.data(), N, H, D, rotary_dim, theta);
  // Float cos/sin (each rounded once from double) and 2 rounded products + 1 sum per output: a few
  // ulp (6e-8) per entry. An angle taken in float at pos 1e6 would be off by ~0.06 rad, i.e. ~6e-2.
  const double forward_error = relative_error(got, want);
  EXPECT_LE(forward_error, 1e-6);

  auto dwant = x_double;
  reference::rope_backward(dwant.data(), pos.data(), N, H, D, rotary_dim, theta);
  auto dgot = x;
  cpu::rope_backward(dgot.data(), pos.data(), N, H, D, rotary_dim, theta);
  const double backward_error = relative_error(dgot, dwant);
  EXPECT_LE(backward_error, 1e-6);  // same arithmetic as forward, with −sin
  std::printf("[ errors   ] rope cpu vs reference: forward %.3g, backward %.3g\n", forward_error, backward_error);

  // Round trip in float: orthogonal rotation, so back to x within a few float roundings.
  cpu::rope_forward(dgot.data(), pos.data(), N, H, D, rotary_dim, theta);
  const double round_trip_error = relative_error(dgot, x);
  EXPECT_LE(round_trip_error, 1e-6);
  std::printf("[ errors   ] rope cpu round trip: %.3g\n", round_trip_error);
}

}  // namespace
}  // namespace fpdt::kernels

// SwiGLU and GELU: reference values and finite differences in float64; the fast CPU kernels against
// the reference (in double) on random and extreme inputs, with a length that is not a multiple of 8.
#include <cmath>
#include <cstdint>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/kernels/cpu/kernels.h"
#include "fpdt/kernels/reference/activation.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::fresh_seed;
using testing::random_normal;
using testing::relative_error;

// Central difference of an elementwise function at every x[i].
template <typename F>
std::vector<double> central_differences(const std::vector<double>& x, double h, F f) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = (f(x[i] + h, i) - f(x[i] - h, i)) / (2 * h);
  return out;
}

TEST(ActivationReference, KnownValues) {
  const double gate[2] = {1.0, 0.0}, up[2] = {2.0, 5.0};
  double out[2];
  reference::swiglu_forward(out, gate, up, 2);
  // silu(1) = 1 / (1 + e^−1) = 0.7310585786300049; one rounding each side.
  EXPECT_NEAR(out[0], 2.0 * 0.7310585786300049, 1e-15);
  EXPECT_EQ(out[1], 0.0);  // silu(0) = 0 exactly

  const double x[3] = {0.0, 1.0, -30.0};
  double y[3];
  reference::gelu_forward(y, x, 3);
  EXPECT_EQ(y[0], 0.0);
  // gelu_tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) · 1.044715)) = 0.8411919906082768 (PyTorch approximate='tanh').
  EXPECT_NEAR(y[1], 0.8411919906082768, 1e-15);
  EXPECT_NEAR(y[2], 0.0, 1e-300);  // far left tail: 0.5 x (1 + tanh(u)) underflows to (−)0
}

TEST(ActivationReference, SwigluBackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const int64_t n = 64;
  const auto gate = random_normal<double>(rng, n, 3.0);
  const auto up = random_normal<double>(rng, n, 3.0);
  const auto w = random_normal<double>(rng, n);  // loss = Σ w ∘ out, so dout = w
  std::vector<double> dgate(n), dup(n);
  reference::swiglu_backward(dgate.data(), dup.data(), w.data(), gate.data(), up.data(), n);

  auto loss_term = [&](double g, double u, size_t i) {
    double out;
    reference::swiglu_forward(&out, &g, &u, 1);
    return w[i] * out;
  };
  const double h = 1e-5;
  const auto numeric_dgate = central_differences(gate, h, [&](double g, size_t i) { return loss_term(g, up[i], i); });
  const auto numeric_dup = central_differences(up, h, [&](double u, size_t i) { return loss_term(gate[i], u, i); });
  // Truncation h² f'''/6 ≈ 1e-10 and cancellation 1e-16 / h ≈ 1e-11, relative to entries of O(1).
  const double dgate_error = relative_error(dgate, numeric_dgate);
  const double dup_error = relative_error(dup, numeric_dup);
  EXPECT_LE(dgate_error, 1e-8);
  EXPECT_LE(dup_error, 1e-8);
  std::printf("[ errors   ] swiglu reference vs finite differences: dgate %.3g, dup %.3g\n", dgate_error, dup_error);
}

TEST(ActivationReference, GeluBackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const int64_t n = 64;
  const auto x = random_normal<double>(rng, n, 2.0);
  const auto w = random_normal<double>(rng, n);
  std::vector<double> dx(n);
  reference::gelu_backward(dx.data(), w.data(), x.data(), n);
  const auto numeric = central_differences(x, 1e-5, [&](double v, size_t i) {
    double y;
    reference::gelu_forward(&y, &v, 1);
    return w[i] * y;
  });
  // As for SwiGLU: O(h²) truncation plus O(1e-16 / h) cancellation, both far below 1e-8.
  const double error = relative_error(dx, numeric);
  EXPECT_LE(error, 1e-8);
  std::printf("[ errors   ] gelu reference vs finite differences: dx %.3g\n", error);
}

TEST(ActivationCpu, MatchesReference) {
  Rng rng(fresh_seed());
  const int64_t n = 1037;  // 129 blocks of 8 and a tail of 5
  auto gate = random_normal<float>(rng, n, 3.0);
  auto up = random_normal<float>(rng, n, 3.0);
  auto x = random_normal<float>(rng, n, 3.0);
  const auto dout = random_normal<float>(rng, n);
  // Extremes: saturated sigmoid / tanh on both sides, and exactly zero.
  const float extremes[] = {-100.0f, -40.0f, -10.0f, 0.0f, 10.0f, 40.0f, 100.0f};
  for (size_t i = 0; i < std::size(extremes); ++i) gate[i] = x[i] = extremes[i];
  const std::vector<double> gate_d(gate.begin(), gate.end()), up_d(up.begin(), up.end()),
      x_d(x.begin(), x.end()), dout_d(dout.begin(), dout.end());

  // fp32 inputs are exact in double, so the gap is the fast kernel's own error: the vector exp
  // (≈ 2 ulp), one division and a handful of rounded products, i.e. ~1e-7 per entry. 2e-6 leaves
  // room for the error amplification of silu' and gelu' near their zero crossings.
  constexpr double kTolerance = 2e-6;

  std::vector<double> want(n), want2(n);
  std::vector<float> got(n), got2(n);
  reference::swiglu_forward(want.data(), gate_d.data(), up_d.data(), n);
  cpu::swiglu_forward(got.data(), gate.data(), up.data(), n);
  const double swiglu_forward_error = relative_error(got, want);
  EXPECT_LE(swiglu_forward_error, kTolerance);

  reference::swiglu_backward(want.data(), want2.data(), dout_d.data(), gate_d.data(), up_d.data(), n);
  cpu::swiglu_backward(got.data(), got2.data(), dout.data(), gate.data(), up.data(), n);
  const double swiglu_dgate_error = relative_error(got, want);
  const double swiglu_dup_error = relative_error(got2, want2);
  EXPECT_LE(swiglu_dgate_error, kTolerance);
  EXPECT_LE(swiglu_dup_error, kTolerance);

  reference::gelu_forward(want.data(), x_d.data(), n);
  cpu::gelu_forward(got.data(), x.data(), n);
  const double gelu_forward_error = relative_error(got, want);
  EXPECT_LE(gelu_forward_error, kTolerance);

  reference::gelu_backward(want.data(), dout_d.data(), x_d.data(), n);
  cpu::gelu_backward(got.data(), dout.data(), x.data(), n);
  const double gelu_backward_error = relative_error(got, want);
  EXPECT_LE(gelu_backward_error, kTolerance);

  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(got[i])) << "gelu_backward at " << i;
  std::printf("[ errors   ] activation cpu vs reference: swiglu fwd %.3g dgate %.3g dup %.3g; gelu fwd %.3g bwd %.3g\n",
              swiglu_forward_error, swiglu_dgate_error, swiglu_dup_error, gelu_forward_error, gelu_backward_error);
}

// A large n so the OpenMP path runs too; each element's arithmetic does not depend on the split.
TEST(ActivationCpu, ParallelPathMatchesReference) {
  Rng rng(fresh_seed());
  const int64_t n = (int64_t{1} << 16) + 3;
  const auto gate = random_normal<float>(rng, n, 3.0);
  const auto up = random_normal<float>(rng, n, 3.0);
  const std::vector<double> gate_d(gate.begin(), gate.end()), up_d(up.begin(), up.end());
  std::vector<double> want(n);
  std::vector<float> got(n);
  reference::swiglu_forward(want.data(), gate_d.data(), up_d.data(), n);
  cpu::swiglu_forward(got.data(), gate.data(), up.data(), n);
  EXPECT_LE(relative_error(got, want), 2e-6);  // same bound as MatchesReference
}

}  // namespace
}  // namespace fpdt::kernels

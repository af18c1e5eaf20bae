// SwiGLU and GELU: reference values and finite differences in float64. (Every backend against the
// reference, on random and extreme inputs: backend_ops_test.cpp.)
#include <cmath>
#include <cstdint>
#include <vector>

#include "fpdt/base/random.h"
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

}  // namespace
}  // namespace fpdt::kernels

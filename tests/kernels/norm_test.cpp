// RMSNorm and LayerNorm kernels: the reference backward against float64 finite differences of the
// reference forward, and the fast CPU kernels against the reference run in float64 on the same
// inputs (sizes that are not multiples of the vector width, and one past the parallel threshold).
#include <cstdio>
#include <functional>
#include <ostream>
#include <vector>

#include "fpdt/kernels/cpu/kernels.h"
#include "fpdt/kernels/reference/norm.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::finite_differences;
using testing::to_double;
using testing::fresh_seed;
using testing::random_normal;
using testing::relative_error;

constexpr double kNormEps = 1e-5;

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double total = 0.0;
  for (size_t i = 0; i < a.size(); ++i) total += a[i] * b[i];
  return total;
}

// got − initial, in float64: the increment an accumulating (+=) kernel added.
template <typename T>
std::vector<double> minus(const std::vector<T>& got, const std::vector<T>& initial) {
  std::vector<double> diff(got.size());
  for (size_t i = 0; i < got.size(); ++i) diff[i] = static_cast<double>(got[i]) - static_cast<double>(initial[i]);
  return diff;
}

double report(const char* what, double error) {
  std::printf("[ error    ] %s: %.3e\n", what, error);
  return error;
}

// Central differences with step 1e-6 in float64: truncation error ~1e-12 · |f'''|, rounding error
// ~1e-16 · |loss| / 1e-6 ~ 1e-10 relative; 1e-6 is far above both and far below any real bug.
constexpr double kFiniteDifferenceTolerance = 1e-6;

TEST(RmsNorm, ReferenceBackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const int64_t N = 3;
  const int h = 7;
  auto x = random_normal<double>(rng, N * h);
  auto weight = random_normal<double>(rng, h);
  const auto projection = random_normal<double>(rng, N * h);  // loss = Σ projection ∘ out
  std::vector<double> out(N * h), rstd(N);
  auto loss = [&] {
    reference::rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, h, kNormEps);
    return dot(projection, out);
  };
  const auto dx_numeric = finite_differences(x, loss);
  const auto dweight_numeric = finite_differences(weight, loss);

  loss();  // rstd at the unperturbed point
  const auto dx_initial = random_normal<double>(rng, N * h);  // += outputs start from non-zero content
  const auto dweight_initial = random_normal<double>(rng, h);
  auto dx = dx_initial;
  auto dweight = dweight_initial;
  reference::rmsnorm_backward(dx.data(), dweight.data(), projection.data(), x.data(), weight.data(), rstd.data(),
                              N, h);
  EXPECT_LE(report("rmsnorm reference dx vs finite differences", relative_error(minus(dx, dx_initial), dx_numeric)),
            kFiniteDifferenceTolerance);
  EXPECT_LE(report("rmsnorm reference dweight vs finite differences",
                   relative_error(minus(dweight, dweight_initial), dweight_numeric)),
            kFiniteDifferenceTolerance);
}

TEST(LayerNorm, ReferenceBackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const int64_t N = 3;
  const int h = 7;
  auto x = random_normal<double>(rng, N * h);
  for (auto& value : x) value += 0.7;  // a non-zero mean, so the mean's gradient path matters
  auto weight = random_normal<double>(rng, h);
  auto bias = random_normal<double>(rng, h);
  const auto projection = random_normal<double>(rng, N * h);  // loss = Σ projection ∘ out
  std::vector<double> out(N * h), mean(N), rstd(N);
  auto loss = [&] {
    reference::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N, h,
                                 kNormEps);
    return dot(projection, out);
  };
  const auto dx_numeric = finite_differences(x, loss);
  const auto dweight_numeric = finite_differences(weight, loss);
  const auto dbias_numeric = finite_differences(bias, loss);

  loss();  // mean and rstd at the unperturbed point
  const auto dx_initial = random_normal<double>(rng, N * h);  // += outputs start from non-zero content
  const auto dweight_initial = random_normal<double>(rng, h);
  const auto dbias_initial = random_normal<double>(rng, h);
  auto dx = dx_initial;
  auto dweight = dweight_initial;
  auto dbias = dbias_initial;
  reference::layernorm_backward(dx.data(), dweight.data(), dbias.data(), projection.data(), x.data(),
                                weight.data(), mean.data(), rstd.data(), N, h);
  EXPECT_LE(
      report("layernorm reference dx vs finite differences", relative_error(minus(dx, dx_initial), dx_numeric)),
      kFiniteDifferenceTolerance);
  EXPECT_LE(report("layernorm reference dweight vs finite differences",
                   relative_error(minus(dweight, dweight_initial), dweight_numeric)),
            kFiniteDifferenceTolerance);
  EXPECT_LE(report("layernorm reference dbias vs finite differences",
                   relative_error(minus(dbias, dbias_initial), dbias_numeric)),
            kFiniteDifferenceTolerance);
}

struct Size {
  int64_t N;
  int h;
};
void PrintTo(const Size& s, std::ostream* os) { *os << "N" << s.N << "_h" << s.h; }

// The fast kernels do elementwise work in fp32 (a few roundings of 6e-8 each) and every reduction
// (row statistics over h, weight gradients over N) in float64, so they sit within a few fp32 ulps
// of the float64 reference; 1e-5 leaves a wide margin and still catches any wrong term.
constexpr double kFastTolerance = 1e-5;

class NormFast : public ::testing::TestWithParam<Size> {};

TEST_P(NormFast, RmsNormMatchesReference) {
  const auto [N, h] = GetParam();
  Rng rng(fresh_seed());
  const auto x = random_normal<float>(rng, N * h);
  const auto weight = random_normal<float>(rng, h);
  const auto dout = random_normal<float>(rng, N * h);
  const auto x64 = to_double(x), weight64 = to_double(weight), dout64 = to_double(dout);

  std::vector<float> out(N * h), rstd(N);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, h, kNormEps);
  std::vector<double> out_want(N * h), rstd_want(N);
  reference::rmsnorm_forward(out_want.data(), rstd_want.data(), x64.data(), weight64.data(), N, h, kNormEps);
  EXPECT_LE(report("rmsnorm fast out vs reference", relative_error(out, out_want)), kFastTolerance);
  EXPECT_LE(report("rmsnorm fast rstd vs reference", relative_error(rstd, rstd_want)), kFastTolerance);

  // Backward from the same saved rstd (the fast forward's) on both sides.
  const auto dx_initial = random_normal<float>(rng, N * h);  // += outputs start from non-zero content
  const auto dweight_initial = random_normal<float>(rng, h);
  auto dx = dx_initial;
  auto dweight = dweight_initial;
  cpu::rmsnorm_backward(dx.data(), dweight.data(), dout.data(), x.data(), weight.data(), rstd.data(), N, h);
  auto dx_want = to_double(dx_initial);
  auto dweight_want = to_double(dweight_initial);
  reference::rmsnorm_backward(dx_want.data(), dweight_want.data(), dout64.data(), x64.data(), weight64.data(),
                              to_double(rstd).data(), N, h);
  EXPECT_LE(report("rmsnorm fast dx vs reference",
                   relative_error(minus(dx, dx_initial), minus(dx_want, to_double(dx_initial)))),
            kFastTolerance);
  EXPECT_LE(report("rmsnorm fast dweight vs reference",
                   relative_error(minus(dweight, dweight_initial), minus(dweight_want, to_double(dweight_initial)))),
            kFastTolerance);
}

void check_layernorm(int64_t N, int h, bool with_bias) {
  Rng rng(fresh_seed());
  auto x = random_normal<float>(rng, N * h);
  for (auto& value : x) value += 3.0f;  // a mean well away from zero: tests the two-pass variance
  const auto weight = random_normal<float>(rng, h);
  const auto bias = random_normal<float>(rng, h);
  const auto dout = random_normal<float>(rng, N * h);
  const auto x64 = to_double(x), weight64 = to_double(weight), bias64 = to_double(bias), dout64 = to_double(dout);

  std::vector<float> out(N * h), mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                         with_bias ? bias.data() : nullptr, N, h, kNormEps);
  std::vector<double> out_want(N * h), mean_want(N), rstd_want(N);
  reference::layernorm_forward(out_want.data(), mean_want.data(), rstd_want.data(), x64.data(), weight64.data(),
                               with_bias ? bias64.data() : nullptr, N, h, kNormEps);
  EXPECT_LE(report("layernorm fast out vs reference", relative_error(out, out_want)), kFastTolerance);
  EXPECT_LE(report("layernorm fast mean vs reference", relative_error(mean, mean_want)), kFastTolerance);
  EXPECT_LE(report("layernorm fast rstd vs reference", relative_error(rstd, rstd_want)), kFastTolerance);

  // Backward from the same saved mean and rstd (the fast forward's) on both sides.
  const auto dx_initial = random_normal<float>(rng, N * h);  // += outputs start from non-zero content
  const auto dweight_initial = random_normal<float>(rng, h);
  const auto dbias_initial = random_normal<float>(rng, h);
  auto dx = dx_initial;
  auto dweight = dweight_initial;
  auto dbias = dbias_initial;
  cpu::layernorm_backward(dx.data(), dweight.data(), with_bias ? dbias.data() : nullptr, dout.data(), x.data(),
                          weight.data(), mean.data(), rstd.data(), N, h);
  auto dx_want = to_double(dx_initial);
  auto dweight_want = to_double(dweight_initial);
  auto dbias_want = to_double(dbias_initial);
  reference::layernorm_backward(dx_want.data(), dweight_want.data(), with_bias ? dbias_want.data() : nullptr,
                                dout64.data(), x64.data(), weight64.data(), to_double(mean).data(),
                                to_double(rstd).data(), N, h);
  EXPECT_LE(report("layernorm fast dx vs reference",
                   relative_error(minus(dx, dx_initial), minus(dx_want, to_double(dx_initial)))),
            kFastTolerance);
  EXPECT_LE(report("layernorm fast dweight vs reference",
                   relative_error(minus(dweight, dweight_initial), minus(dweight_want, to_double(dweight_initial)))),
            kFastTolerance);
  if (with_bias) {
    EXPECT_LE(report("layernorm fast dbias vs reference",
                     relative_error(minus(dbias, dbias_initial), minus(dbias_want, to_double(dbias_initial)))),
              kFastTolerance);
  }
}

TEST_P(NormFast, LayerNormMatchesReference) { check_layernorm(GetParam().N, GetParam().h, true); }
TEST_P(NormFast, LayerNormWithoutBiasMatchesReference) { check_layernorm(GetParam().N, GetParam().h, false); }

// 37×100 runs on one thread; 300×512 is past the parallel threshold and spans several column blocks.
INSTANTIATE_TEST_SUITE_P(Sizes, NormFast, ::testing::Values(Size{37, 100}, Size{300, 512}), [](const auto& info) {
  return std::string("N").append(std::to_string(info.param.N)).append("_h").append(std::to_string(info.param.h));
});

}  // namespace
}  // namespace fpdt::kernels

// RMSNorm and LayerNorm: the reference backward against float64 finite differences of the reference
// forward, and the cpu backward independent of the thread count, bitwise. (Every backend against the
// reference: backend_ops_test.cpp.)
#include <omp.h>

#include <cstdio>
#include <functional>
#include <vector>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/reference/norm.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::finite_differences;
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

// The cpu backward sums dweight (and dbias) over blocks of rows fixed by N: 1 thread and 3 give the same
// bits. N = 1000 spans 32 blocks of 32 rows with a short last one (and the parallel path); h = 300 has a
// partial column block.
TEST(NormCpu, BackwardDoesNotDependOnThreads) {
  Rng rng(fresh_seed());
  const int64_t N = 1000;
  const int h = 300;
  const auto x = random_normal<float>(rng, N * h);
  const auto dout = random_normal<float>(rng, N * h);
  const auto weight = random_normal<float>(rng, h);
  std::vector<float> out(N * h), mean(N), rstd(N);
  cpu::CpuBackend cpu;
  const int threads = omp_get_max_threads();
  for (const bool layernorm : {false, true}) {
    if (layernorm)
      cpu.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), weight.data(), N, h,
                            kNormEps);
    else
      cpu.rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, h, kNormEps);
    std::vector<std::vector<float>> grads;  // per thread count: dx, dweight, dbias one after another
    for (const int team : {1, 3}) {
      omp_set_num_threads(team);
      std::vector<float> dx(N * h, 0.5f), dweight(h, 0.25f), dbias(h, 0.125f);
      if (layernorm)
        cpu.layernorm_backward(dx.data(), dweight.data(), dbias.data(), dout.data(), x.data(), weight.data(),
                               mean.data(), rstd.data(), N, h);
      else
        cpu.rmsnorm_backward(dx.data(), dweight.data(), dout.data(), x.data(), weight.data(), rstd.data(), N, h);
      dx.insert(dx.end(), dweight.begin(), dweight.end());
      dx.insert(dx.end(), dbias.begin(), dbias.end());
      grads.push_back(dx);
    }
    omp_set_num_threads(threads);
    EXPECT_EQ(grads[0], grads[1]) << (layernorm ? "layernorm" : "rmsnorm");
  }
}

}  // namespace
}  // namespace fpdt::kernels

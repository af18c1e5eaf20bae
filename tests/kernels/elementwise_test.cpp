// Elementwise helpers: sum_squares against a plain float64 loop (and independent of the thread
// count, bitwise), scale_inplace exactly equal to one fp32 multiplication per element.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "fpdt/kernels/cpu/kernels.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::fresh_seed;
using testing::random_normal;

class Elementwise : public ::testing::TestWithParam<int64_t> {};

TEST_P(Elementwise, SumSquaresMatchesDoubleLoop) {
  const int64_t n = GetParam();
  Rng rng(fresh_seed());
  const auto x = random_normal<float>(rng, n, 3.0);
  double want = 0.0;
  for (const float value : x) want += static_cast<double>(value) * value;
  const double got = cpu::sum_squares(x.data(), n);
  const double error = n == 0 ? std::abs(got) : std::abs(got - want) / want;
  std::printf("[ error    ] sum_squares n=%lld vs double loop: %.3e\n", static_cast<long long>(n), error);
  // Squares of floats are exact in float64; only the order of ≤ 1e5 float64 additions differs
  // (worst case n · 1.1e-16 ≈ 1e-11, typically ~1e-16): 1e-12 relative.
  EXPECT_LE(error, 1e-12);
}

TEST_P(Elementwise, SumSquaresDoesNotDependOnThreads) {
  const int64_t n = GetParam();
  Rng rng(fresh_seed());
  const auto x = random_normal<float>(rng, n);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one_thread = cpu::sum_squares(x.data(), n);
  omp_set_num_threads(3);
  const double three_threads = cpu::sum_squares(x.data(), n);
  omp_set_num_threads(threads);
  EXPECT_EQ(one_thread, three_threads);  // fixed slices summed in a fixed order: bitwise
}

TEST_P(Elementwise, ScaleInplaceIsExact) {
  const int64_t n = GetParam();
  Rng rng(fresh_seed());
  auto x = random_normal<float>(rng, n);
  const auto original = x;
  const float alpha = static_cast<float>(rng.uniform(-2.0, 2.0));
  cpu::scale_inplace(x.data(), alpha, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], original[i] * alpha) << "i=" << i;  // one fp32 multiply: exact
}

// 0 and 1: edge cases; 37: below one vector block multiple; 100003: the parallel path, with a tail.
INSTANTIATE_TEST_SUITE_P(Sizes, Elementwise, ::testing::Values(0, 1, 37, 100003),
                         [](const auto& info) { return std::string("n").append(std::to_string(info.param)); });

}  // namespace
}  // namespace fpdt::kernels

// Elementwise helpers on the cpu: sum_squares independent of the thread count, bitwise. (Every
// backend against the reference, scale_inplace bitwise one fp32 multiply: backend_ops_test.cpp.)
#include <omp.h>

#include <vector>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::fresh_seed;
using testing::random_normal;

class Elementwise : public ::testing::TestWithParam<int64_t> {};

TEST_P(Elementwise, SumSquaresDoesNotDependOnThreads) {
  const int64_t n = GetParam();
  Rng rng(fresh_seed());
  const auto x = random_normal<float>(rng, n);
  cpu::CpuBackend cpu;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one_thread = cpu.sum_squares(x.data(), n);
  omp_set_num_threads(3);
  const double three_threads = cpu.sum_squares(x.data(), n);
  omp_set_num_threads(threads);
  EXPECT_EQ(one_thread, three_threads);  // fixed slices summed in a fixed order: bitwise
}

// 0 and 1: edge cases; 37: below one vector block multiple; 100003: the parallel path, with a tail.
INSTANTIATE_TEST_SUITE_P(Sizes, Elementwise, ::testing::Values(0, 1, 37, 100003),
                         [](const auto& info) { return std::string("n").append(std::to_string(info.param)); });

}  // namespace
}  // namespace fpdt::kernels

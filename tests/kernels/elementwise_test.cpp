// Elementwise helpers on the cpu: sum_squares independent of the thread count, bitwise; subnormals
// flushed to zero on every thread. (Every backend against the reference, scale_inplace bitwise one fp32
// multiply: backend_ops_test.cpp.)
#include <omp.h>

#include <algorithm>
#include <limits>
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
  // One block (its slices shared by the threads), the gradient norm's blocks of 1024, and blocks of 7.
  for (const int64_t block : {std::max<int64_t>(n, 1), int64_t{1024}, int64_t{7}}) {
    const size_t blocks = static_cast<size_t>((n + block - 1) / block);
    std::vector<double> one_thread(blocks), three_threads(blocks);
    omp_set_num_threads(1);
    cpu.sum_squares(one_thread.data(), x.data(), n, block);
    omp_set_num_threads(3);
    cpu.sum_squares(three_threads.data(), x.data(), n, block);
    omp_set_num_threads(threads);
    for (size_t b = 0; b < blocks; ++b)  // fixed slices summed in a fixed order: bitwise
      EXPECT_EQ(one_thread[b], three_threads[b]) << "block " << b << " of " << block << " floats";
  }
}

// 0 and 1: edge cases; 37: below one vector block multiple; 100003: the parallel path, with a tail.
INSTANTIATE_TEST_SUITE_P(Sizes, Elementwise, ::testing::Values(0, 1, 37, 100003),
                         [](const auto& info) { return std::string("n").append(std::to_string(info.param)); });

// The cpu backend sets its OpenMP team to flush subnormals (linear.cpp; a trained model's attention
// otherwise slows several-fold): on every thread, of the team it found and of a larger one made later,
// a subnormal operand reads as 0 (DAZ) and a product below 2^-126 is written as 0 (FTZ). Without the
// mode the first is 2^-140 and the second 2^-130.
TEST(Subnormals, FlushedToZeroOnEveryThreadOfTheTeam) {
  cpu::CpuBackend cpu;
  for (const int threads : {omp_get_max_threads(), omp_get_max_threads() + 2}) {
    std::vector<float> read(threads, -1.0f), written(threads, -1.0f);
    int team = 0;
#pragma omp parallel num_threads(threads)
    {
      volatile float subnormal = 0x1p-140f, small = 0x1p-65f;  // volatile: computed here, not by the compiler
      read[omp_get_thread_num()] = subnormal * 1.0f;
      written[omp_get_thread_num()] = small * small;
#pragma omp single
      team = omp_get_num_threads();
    }
    ASSERT_EQ(team, threads) << "the OpenMP runtime gave a smaller team";
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(read[t], 0.0f) << "thread " << t << " of " << threads << " read a subnormal as itself";
      EXPECT_EQ(written[t], 0.0f) << "thread " << t << " of " << threads << " wrote a subnormal product";
    }
  }
  static_assert(0x1p-140f < std::numeric_limits<float>::min() && 0x1p-140f > 0.0f, "2^-140 is subnormal");
}

}  // namespace
}  // namespace fpdt::kernels

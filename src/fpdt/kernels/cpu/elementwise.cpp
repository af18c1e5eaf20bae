// Fast fp32 elementwise helpers for the model and trainer (reference/elementwise.h): sums of squares in
// float64 (gradient norms), in-place scaling and adding, and counts of invalid values (finiteness checks). sum_squares is deterministic whatever the thread count:
// each block's sum adds a fixed set of slices, each summed in a fixed order; the threads share the
// blocks, or a single block's slices.
#include <algorithm>
#include <cmath>
#include <limits>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/gemm.h"
#include "fpdt/kernels/cpu/simd.h"
#include "fpdt/tensor/dtype.h"

namespace fpdt::kernels::cpu {

namespace {

constexpr int64_t kParallelMinElements = int64_t{1} << 15;  // below this a thread team costs more than it saves
constexpr int kSlices = 64;                                  // fixed, so the sum does not depend on the threads

// Σ x[i]² over [0, n), each product formed and summed in double (a float's square is exact in double).
double sum_squares_serial(const float* x, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    const __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  return total;
}

// Σ x[i]² over [0, n) as kSlices slice sums added in order; the slices on the team when `parallel`.
double sum_squares_sliced(const float* x, int64_t n, bool parallel) {
  double partial[kSlices];
  const int64_t slice = (n + kSlices - 1) / kSlices;
#pragma omp parallel for schedule(static) if (parallel)
  for (int s = 0; s < kSlices; ++s) {
    const int64_t begin = std::min(n, s * slice);
    const int64_t end = std::min(n, begin + slice);
    partial[s] = sum_squares_serial(x + begin, end - begin);
  }
  double total = 0.0;
  for (int s = 0; s < kSlices; ++s) total += partial[s];
  return total;
}

}  // namespace

void CpuBackend::sum_squares(double* sums, const float* x, int64_t n, int64_t block) {
  const int64_t blocks = (n + block - 1) / block;
  if (blocks == 1) {
    sums[0] = sum_squares_sliced(x, n, n >= kParallelMinElements);
    return;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t b = 0; b < blocks; ++b)
    sums[b] = sum_squares_sliced(x + b * block, std::min(block, n - b * block), false);
}

void CpuBackend::scale_inplace(float* x, float alpha, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void CpuBackend::round_to_bf16(float* x, int64_t n) { round_to_bf16_values(x, x, n); }

void CpuBackend::pack_bf16(uint16_t* dst, const float* src, int64_t n) { to_bf16(dst, src, n); }

void CpuBackend::unpack_bf16(float* dst, const uint16_t* src, int64_t n) { bf16_to_floats(dst, src, n); }

void CpuBackend::add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// A vectorised count on the OpenMP team: it runs over the weights after every step, and a serial scan
// of a small model's weights had left the other core idle for ~2 % of its step.
void CpuBackend::count_invalid(int64_t* count, const float* x, int64_t n, bool negative_invalid) {
  constexpr float kMax = std::numeric_limits<float>::max();
  int64_t invalid = 0;
#pragma omp parallel for schedule(static) reduction(+ : invalid) if (n >= (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i)
    invalid += static_cast<int64_t>(!(std::fabs(x[i]) <= kMax)) |  // NaN compares false
               static_cast<int64_t>(negative_invalid && x[i] < 0.0f);
  *count = invalid;
}

}  // namespace fpdt::kernels::cpu

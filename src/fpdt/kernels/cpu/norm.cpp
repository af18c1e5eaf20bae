// Fast fp32 RMSNorm and LayerNorm (semantics: reference/norm.h). Row statistics (Σx, Σ(x−mean)²,
// the backward's dot products) are accumulated in double with AVX2, elementwise work is float.
// Backward is one pass over row blocks (dx, and each block's float64 dweight/dbias partials), then the
// partials summed in block order by column blocks; the blocks depend on N alone, so results do not
// depend on the thread count. Heap: the partials, ≤ 64·2·h doubles, kept by the calling thread.
#include <algorithm>
#include <cmath>
#include <vector>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/simd.h"

namespace fpdt::kernels::cpu {

namespace {

constexpr int64_t kParallelMinElements = int64_t{1} << 14;  // below this a thread team costs more than it saves
constexpr int kColumnBlock = 128;                            // columns per block in the dweight pass (1 KiB of doubles)

__m256d load4_pd(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }

double horizontal_sum(__m256d v) {
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, v);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// Σ_j (x_j − shift)² in double.
double sum_squares_shifted(const float* x, double shift, int h) {
  const __m256d shift4 = _mm256_set1_pd(shift);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int j = 0;
  for (; j + 8 <= h; j += 8) {
    const __m256d a = _mm256_sub_pd(load4_pd(x + j), shift4);
    const __m256d b = _mm256_sub_pd(load4_pd(x + j + 4), shift4);
    acc0 = _mm256_fmadd_pd(a, a, acc0);
    acc1 = _mm256_fmadd_pd(b, b, acc1);
  }
  double total = horizontal_sum(_mm256_add_pd(acc0, acc1));
  for (; j < h; ++j) total += (x[j] - shift) * (x[j] - shift);
  return total;
}

// Σ_j x_j in double.
double sum(const float* x, int h) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int j = 0;
  for (; j + 8 <= h; j += 8) {
    acc0 = _mm256_add_pd(acc0, load4_pd(x + j));
    acc1 = _mm256_add_pd(acc1, load4_pd(x + j + 4));
  }
  double total = horizontal_sum(_mm256_add_pd(acc0, acc1));
  for (; j < h; ++j) total += x[j];
  return total;
}

// Σ_j a_j · b_j · (c_j − shift) in double, and Σ_j a_j · b_j in *ab_sum.
double dot3_shifted(const float* a, const float* b, const float* c, double shift, int h, double* ab_sum) {
  const __m256d shift4 = _mm256_set1_pd(shift);
  __m256d acc = _mm256_setzero_pd(), acc_ab = _mm256_setzero_pd();
  int j = 0;
  for (; j + 4 <= h; j += 4) {
    const __m256d ab = _mm256_mul_pd(load4_pd(a + j), load4_pd(b + j));
    acc_ab = _mm256_add_pd(acc_ab, ab);
    acc = _mm256_fmadd_pd(ab, _mm256_sub_pd(load4_pd(c + j), shift4), acc);
  }
  double total = horizontal_sum(acc), total_ab = horizontal_sum(acc_ab);
  for (; j < h; ++j) {
    const double ab = static_cast<double>(a[j]) * b[j];
    total_ab += ab;
    total += ab * (c[j] - shift);
  }
  *ab_sum = total_ab;
  return total;
}

// The backward's one pass: rows in blocks whose size depends on N alone (at least kMinBlockRows rows, at
// most kMaxBlocks blocks), threads across blocks. row(n, w_sum, b_sum) writes row n's dx and adds its
// dweight (and dbias) terms into its block's float64 partial sums; the partials are then added in block
// order, column blocks across threads: the same sums whatever the thread count.
//   dweight (h) += Σ_n dout[n] ∘ x̂[n];  dbias (h) += Σ_n dout[n]   (when non-null)
constexpr int64_t kMinBlockRows = 32;
constexpr int64_t kMaxBlocks = 64;

template <typename Row>
void backward_by_row_blocks(float* dweight, float* dbias, int64_t N, int h, const Row& row) {
  const int64_t rows = std::max(kMinBlockRows, (N + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t blocks = (N + rows - 1) / rows;
  const int64_t sums = dbias ? 2 : 1;  // dweight's partials, then dbias's
  thread_local std::vector<double> calling_thread_partials;  // (blocks, sums, h), grown once
  std::vector<double>& storage = calling_thread_partials;    // the team writes the caller's
  if (storage.size() < static_cast<size_t>(blocks * sums * h)) storage.resize(static_cast<size_t>(blocks * sums * h));
  double* partials = storage.data();
  const bool parallel = N * h >= kParallelMinElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t block = 0; block < blocks; ++block) {
    double* w_sum = partials + block * sums * h;  // (h)
    double* b_sum = dbias ? w_sum + h : nullptr;  // (h)
    std::fill(w_sum, w_sum + sums * h, 0.0);
    for (int64_t n = block * rows; n < std::min(N, (block + 1) * rows); ++n) row(n, w_sum, b_sum);
  }
  const int column_blocks = (h + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (int column_block = 0; column_block < column_blocks; ++column_block) {
    const int j0 = column_block * kColumnBlock, j1 = std::min(h, j0 + kColumnBlock);
    for (int64_t part = 0; part < sums; ++part) {
      float* target = part == 0 ? dweight : dbias;
      for (int j = j0; j < j1; ++j) {
        double total = 0.0;
        for (int64_t block = 0; block < blocks; ++block) total += partials[(block * sums + part) * h + j];
        target[j] = static_cast<float>(target[j] + total);
      }
    }
  }
}

}  // namespace

void CpuBackend::rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int h,
                                 double eps) {
#pragma omp parallel for schedule(static) if (N * h >= kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* x_row = x + n * h;  // (h)
    float* out_row = out + n * h;    // (h)
    const double r = 1.0 / std::sqrt(sum_squares_shifted(x_row, 0.0, h) / h + eps);
    const float r_f = static_cast<float>(r);
    for (int j = 0; j < h; ++j) out_row[j] = x_row[j] * r_f * weight[j];
    rstd[n] = r_f;
  }
}

void CpuBackend::rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                                  const float* rstd, int64_t N, int h) {
  // dx_j += r · w_j · dy_j − (r³ / h) · x_j · Σ_k dy_k w_k x_k;  dweight_j += Σ_n dy_j · x_j · r
  backward_by_row_blocks(dweight, nullptr, N, h, [&](int64_t n, double* w_sum, double*) {
    const float* x_row = x + n * h;        // (h)
    const float* dout_row = dout + n * h;  // (h)
    float* dx_row = dx + n * h;            // (h)
    const double r = rstd[n];
    double unused;
    const double dot = dot3_shifted(dout_row, weight, x_row, 0.0, h, &unused);
    const float coeff = static_cast<float>(r * r * r * dot / h);
    const float r_f = rstd[n];
    for (int j = 0; j < h; ++j) dx_row[j] += r_f * weight[j] * dout_row[j] - coeff * x_row[j];
    for (int j = 0; j < h; ++j) w_sum[j] += static_cast<double>(dout_row[j]) * (x_row[j] * r);
  });
}

void CpuBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                                   const float* bias, int64_t N, int h, double eps) {
#pragma omp parallel for schedule(static) if (N * h >= kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* x_row = x + n * h;  // (h)
    float* out_row = out + n * h;    // (h)
    const double mu = sum(x_row, h) / h;
    const double r = 1.0 / std::sqrt(sum_squares_shifted(x_row, mu, h) / h + eps);
    const float mu_f = static_cast<float>(mu), r_f = static_cast<float>(r);
    if (bias) {
      for (int j = 0; j < h; ++j) out_row[j] = (x_row[j] - mu_f) * r_f * weight[j] + bias[j];
    } else {
      for (int j = 0; j < h; ++j) out_row[j] = (x_row[j] - mu_f) * r_f * weight[j];
    }
    mean[n] = mu_f;
    rstd[n] = r_f;
  }
}

void CpuBackend::layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                                    const float* weight, const float* mean, const float* rstd, int64_t N, int h) {
  // dx += r · (g − mean(g) − x̂ · mean(g ∘ x̂)) with g = dy ∘ w, x̂ = (x − mean) · r;
  // dweight_j += Σ_n dy_j · x̂_j;  dbias_j += Σ_n dy_j
  backward_by_row_blocks(dweight, dbias, N, h, [&](int64_t n, double* w_sum, double* b_sum) {
    const float* x_row = x + n * h;        // (h)
    const float* dout_row = dout + n * h;  // (h)
    float* dx_row = dx + n * h;            // (h)
    const double r = rstd[n];
    double g_sum;
    const double g_xhat_sum = dot3_shifted(dout_row, weight, x_row, mean[n], h, &g_sum) * r;
    const float g_mean = static_cast<float>(g_sum / h);
    const float g_xhat_mean = static_cast<float>(g_xhat_sum / h);
    const float mu_f = mean[n], r_f = rstd[n];
    for (int j = 0; j < h; ++j) {
      const float xhat = (x_row[j] - mu_f) * r_f;
      dx_row[j] += r_f * (dout_row[j] * weight[j] - g_mean - xhat * g_xhat_mean);
    }
    const double shift = mean[n];
    for (int j = 0; j < h; ++j) w_sum[j] += static_cast<double>(dout_row[j]) * ((x_row[j] - shift) * r);
    if (b_sum) {
      for (int j = 0; j < h; ++j) b_sum[j] += dout_row[j];
    }
  });
}

}  // namespace fpdt::kernels::cpu

// Fast fp32 linear layer (semantics: reference/linear.h; w is (out, in)). Every product is one
// OpenBLAS cblas_sgemm; the bias is written (or added) before the forward GEMM, which then runs with
// beta = 1. dbias sums dout's columns in double, column blocks across threads. No heap memory.
#include <cblas.h>

#include <algorithm>

#include "fpdt/kernels/cpu/cpu_backend.h"

namespace fpdt::kernels::cpu {

namespace {

constexpr int64_t kParallelMinElements = int64_t{1} << 15;  // below this a thread team costs more than it saves
constexpr int kColumnBlock = 128;                            // columns per block in the dbias pass (1 KiB of doubles)

// dbias (O) += Σ_n dout[n]   (dout (N, O))
void accumulate_column_sums(float* dbias, const float* dout, int64_t N, int O) {
  const int blocks = (O + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (N * O >= kParallelMinElements)
  for (int block = 0; block < blocks; ++block) {
    const int o0 = block * kColumnBlock;
    const int width = std::min(kColumnBlock, O - o0);
    double acc[kColumnBlock];
    for (int o = 0; o < width; ++o) acc[o] = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      const float* dout_row = dout + n * O + o0;  // (width)
      for (int o = 0; o < width; ++o) acc[o] += dout_row[o];
    }
    for (int o = 0; o < width; ++o) dbias[o0 + o] = static_cast<float>(dbias[o0 + o] + acc[o]);
  }
}

}  // namespace

// Dimensions go to BLAS as 32-bit ints: a chunk's token count N stays far below 2^31.
void CpuBackend::linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I, int O,
                                bool accumulate) {
  if (N == 0 || O == 0) return;
  float beta = accumulate ? 1.0f : 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static) if (N * O >= kParallelMinElements)
    for (int64_t n = 0; n < N; ++n) {
      float* out_row = out + n * O;  // (O)
      if (accumulate) {
        for (int o = 0; o < O; ++o) out_row[o] += bias[o];
      } else {
        for (int o = 0; o < O; ++o) out_row[o] = bias[o];
      }
    }
    beta = 1.0f;
  }
  // out (N, O) = x (N, I) · w^T (I, O) + beta · out
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), O, I, 1.0f, x, std::max(I, 1), w,
              std::max(I, 1), beta, out, O);
}

void CpuBackend::linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                                 int64_t N, int I, int O, bool accumulate_dx) {
  if (N == 0) return;
  if (dx && I > 0) {
    // dx (N, I) = dout (N, O) · w (O, I) + beta · dx
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(N), I, O, 1.0f, dout,
                std::max(O, 1), w, I, accumulate_dx ? 1.0f : 0.0f, dx, I);
  }
  if (O == 0) return;
  if (I > 0) {
    // dw (O, I) += dout^T (O, N) · x (N, I)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, I, static_cast<int>(N), 1.0f, dout, O, x, I, 1.0f,
                dw, I);
  }
  if (dbias) accumulate_column_sums(dbias, dout, N, O);
}

}  // namespace fpdt::kernels::cpu

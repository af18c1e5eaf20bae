// CUDA RMSNorm and LayerNorm, forward and backward (semantics: reference/norm.h). One block per
// row for out / dx (row reductions in fp32 within a thread, summed across the block); dweight and
// dbias as deterministic column sums over row tiles (column_sums.cuh; no atomics).
// out, mean, rstd are overwritten (=); dx, dweight, dbias accumulate (+=). bias/dbias may be null.
#include <cmath>

#include "fpdt/base/cuda_check.h"
#include "fpdt/kernels/cuda/block_reduce.cuh"
#include "fpdt/kernels/cuda/column_sums.cuh"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"

namespace fpdt::kernels::cuda {

namespace {

constexpr int kRowThreads = 256;

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* weight, int h,
                                       float eps) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const float* x_row = x + n * h;
  float* out_row = out + n * h;
  float sum_sq = 0.0f;
  for (int j = threadIdx.x; j < h; j += blockDim.x) sum_sq += x_row[j] * x_row[j];
  sum_sq = block_sum(sum_sq, scratch);
  const float r = rsqrtf(sum_sq / h + eps);
  for (int j = threadIdx.x; j < h; j += blockDim.x) out_row[j] = x_row[j] * r * weight[j];
  if (threadIdx.x == 0) rstd[n] = r;
}

__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* weight,
                                           const float* rstd, int h) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const float* x_row = x + n * h;
  const float* dout_row = dout + n * h;
  float* dx_row = dx + n * h;
  const float r = rstd[n];
  float dot = 0.0f;  // Σ_j dy_j w_j x_j
  for (int j = threadIdx.x; j < h; j += blockDim.x) dot += dout_row[j] * weight[j] * x_row[j];
  dot = block_sum(dot, scratch);
  const float coeff = r * r * r * dot / h;
  for (int j = threadIdx.x; j < h; j += blockDim.x) dx_row[j] += dout_row[j] * weight[j] * r - coeff * x_row[j];
}

// The terms of row n, column j: dweight's dout[n, j] · x̂[n, j], x̂ = (x − mean) · rstd (mean null:
// RMSNorm), and with kOutputs = 2 dbias's dout[n, j].
template <int kOutputs>
struct NormGradientTerms {
  const float* dout;  // (N, h)
  const float* x;     // (N, h)
  const float* mean;  // (N) or null
  const float* rstd;  // (N)
  int h;
  __device__ void operator()(int64_t n, int j, float (&sum)[kOutputs]) const {
    const float dy = dout[n * h + j];
    const float xhat = (x[n * h + j] - (mean ? mean[n] : 0.0f)) * rstd[n];
    sum[0] += dy * xhat;
    if constexpr (kOutputs == 2) sum[1] += dy;
  }
};

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* x, const float* weight,
                                         const float* bias, int h, float eps) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const float* x_row = x + n * h;
  float* out_row = out + n * h;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < h; j += blockDim.x) sum += x_row[j];
  const float mu = block_sum(sum, scratch) / h;
  float sum_sq = 0.0f;  // two passes, as the reference
  for (int j = threadIdx.x; j < h; j += blockDim.x) sum_sq += (x_row[j] - mu) * (x_row[j] - mu);
  const float r = rsqrtf(block_sum(sum_sq, scratch) / h + eps);
  for (int j = threadIdx.x; j < h; j += blockDim.x)
    out_row[j] = (x_row[j] - mu) * r * weight[j] + (bias ? bias[j] : 0.0f);
  if (threadIdx.x == 0) {
    mean[n] = mu;
    rstd[n] = r;
  }
}

__global__ void layernorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* weight,
                                             const float* mean, const float* rstd, int h) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const float* x_row = x + n * h;
  const float* dout_row = dout + n * h;
  float* dx_row = dx + n * h;
  const float mu = mean[n], r = rstd[n];
  float g_sum = 0.0f, g_xhat_sum = 0.0f;
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    const float g = dout_row[j] * weight[j];
    g_sum += g;
    g_xhat_sum += g * (x_row[j] - mu) * r;
  }
  const float g_mean = block_sum(g_sum, scratch) / h;
  const float g_xhat_mean = block_sum(g_xhat_sum, scratch) / h;
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    const float xhat = (x_row[j] - mu) * r;
    dx_row[j] += r * (dout_row[j] * weight[j] - g_mean - xhat * g_xhat_mean);
  }
}

}  // namespace

void CudaBackend::rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int h,
                                  double eps) {
  if (N == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream_>>>(out, rstd, x, weight, h,
                                                                              static_cast<float>(eps));
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                                   const float* rstd, int64_t N, int h) {
  if (N == 0) return;
  rmsnorm_backward_dx_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream_>>>(dx, dout, x, weight, rstd, h);
  FPDT_CUDA_CHECK_LAUNCH();
  add_column_sums<1>(stream_, scratch(column_sums_scratch_floats(1, N, h)), ColumnOutputs<1>{{dweight}},
                     NormGradientTerms<1>{dout, x, nullptr, rstd, h}, N, h);
}

void CudaBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                                    const float* bias, int64_t N, int h, double eps) {
  if (N == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream_>>>(out, mean, rstd, x, weight, bias,
                                                                                h, static_cast<float>(eps));
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                                     const float* weight, const float* mean, const float* rstd, int64_t N, int h) {
  if (N == 0) return;
  layernorm_backward_dx_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream_>>>(dx, dout, x, weight, mean,
                                                                                    rstd, h);
  FPDT_CUDA_CHECK_LAUNCH();
  if (dbias)
    add_column_sums<2>(stream_, scratch(column_sums_scratch_floats(2, N, h)), ColumnOutputs<2>{{dweight, dbias}},
                       NormGradientTerms<2>{dout, x, mean, rstd, h}, N, h);
  else
    add_column_sums<1>(stream_, scratch(column_sums_scratch_floats(1, N, h)), ColumnOutputs<1>{{dweight}},
                       NormGradientTerms<1>{dout, x, mean, rstd, h}, N, h);
}

}  // namespace fpdt::kernels::cuda

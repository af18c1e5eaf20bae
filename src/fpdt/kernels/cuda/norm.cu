// CUDA RMSNorm and LayerNorm, forward and backward (semantics: reference/norm.h). One block per
// row for out / dx (row reductions in fp32 within a thread, summed across the block); dweight and
// dbias by a separate column-sum kernel, one thread per column, deterministic (no atomics).
// out, mean, rstd are overwritten (=); dx, dweight, dbias accumulate (+=). bias/dbias may be null.
#include <cmath>

#include "fpdt/kernels/cuda/block_reduce.cuh"
#include "fpdt/kernels/cuda/cuda_check.h"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"

namespace fpdt::kernels::cuda {

namespace {

constexpr int kRowThreads = 256;
constexpr int kColumnThreads = 256;

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

// dweight[j] += Σ_n dout[n, j] · x̂[n, j], x̂ = (x − mean) · rstd (mean null: RMSNorm);
// dbias[j] += Σ_n dout[n, j] when dbias is non-null.
__global__ void norm_backward_columns_kernel(float* dweight, float* dbias, const float* dout, const float* x,
                                             const float* mean, const float* rstd, int64_t N, int h) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= h) return;
  float dw = 0.0f, db = 0.0f;
  for (int64_t n = 0; n < N; ++n) {
    const float dy = dout[n * h + j];
    const float xhat = (x[n * h + j] - (mean ? mean[n] : 0.0f)) * rstd[n];
    dw += dy * xhat;
    db += dy;
  }
  dweight[j] += dw;
  if (dbias) dbias[j] += db;
}

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

unsigned column_blocks(int h) { return static_cast<unsigned>((h + kColumnThreads - 1) / kColumnThreads); }

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
  norm_backward_columns_kernel<<<column_blocks(h), kColumnThreads, 0, stream_>>>(dweight, nullptr, dout, x, nullptr,
                                                                              rstd, N, h);
  FPDT_CUDA_CHECK_LAUNCH();
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
  norm_backward_columns_kernel<<<column_blocks(h), kColumnThreads, 0, stream_>>>(dweight, dbias, dout, x, mean, rstd,
                                                                              N, h);
  FPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace fpdt::kernels::cuda

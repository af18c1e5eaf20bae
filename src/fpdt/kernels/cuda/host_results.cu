// CUDA ops whose results the host needs (semantics: reference/cross_entropy.h, reference/elementwise.h):
// a chunk's loss sum and counted rows (added to sums the pass keeps on the device), each row's argmax, and
// counts of non-finite (or negative) values. Each reduces on the device in a fixed order (one block for the
// sums, one block per row, integer counts); the argmax and the counts copy their few bytes to the host and
// wait for them. And the device's name (cuda_backend.h).
#include <cmath>
#include <cstdint>
#include <string>

#include "fpdt/base/cuda_check.h"
#include "fpdt/kernels/cuda/block_reduce.cuh"
#include "fpdt/kernels/cuda/cuda_backend.h"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"

namespace fpdt::kernels::cuda {

namespace {

// out[0] += Σ losses, out[1] += Σ mask over counted rows: one block, each thread a fixed stride, then the
// block's fixed tree (deterministic).
__global__ void cross_entropy_sums_kernel(double* out, const float* losses, const int32_t* targets, const float* mask,
                                          int64_t N) {
  __shared__ double scratch[32];
  double loss = 0.0, count = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    loss += static_cast<double>(losses[n]);
    if (targets[n] != kIgnoreIndex) count += mask ? static_cast<double>(mask[n]) : 1.0;
  }
  loss = block_sum(loss, scratch);
  count = block_sum(count, scratch);
  if (threadIdx.x == 0) {
    out[0] += loss;
    out[1] += count;
  }
}

// indices[n] = the first index of row n's largest value: one block per row; each thread keeps its
// first maximum (its indices ascend), then a tree that prefers the larger value, the smaller index on ties.
__global__ void argmax_rows_kernel(int32_t* indices, const float* x, int V) {
  __shared__ float best_value[kThreads];
  __shared__ int best_index[kThreads];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * V;
  float value = -INFINITY;
  int index = V;  // none yet
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    if (index == V || row[v] > value) {
      value = row[v];
      index = v;
    }
  best_value[threadIdx.x] = value;
  best_index[threadIdx.x] = index;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const int other = threadIdx.x + half;
      const bool better = best_index[other] < V &&
                          (best_index[threadIdx.x] == V || best_value[other] > best_value[threadIdx.x] ||
                           (best_value[other] == best_value[threadIdx.x] && best_index[other] < best_index[threadIdx.x]));
      if (better) {
        best_value[threadIdx.x] = best_value[other];
        best_index[threadIdx.x] = best_index[other];
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) indices[blockIdx.x] = best_index[0];
}

// *count += the invalid elements, grid-strided; integer sums, so the order does not matter.
__global__ void count_invalid_kernel(unsigned long long* count, const float* x, int64_t n, bool negative_invalid) {
  __shared__ unsigned long long scratch[32];
  unsigned long long invalid = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    invalid += !isfinite(x[i]) || (negative_invalid && x[i] < 0.0f);
  invalid = block_sum(invalid, scratch);
  if (threadIdx.x == 0 && invalid != 0) atomicAdd(count, invalid);
}

}  // namespace

void CudaBackend::cross_entropy_sums(double* sums, const float* losses, const int32_t* targets, const float* mask,
                                     int64_t N) {
  if (N == 0) return;
  cross_entropy_sums_kernel<<<1, kThreads, 0, stream_>>>(sums, losses, targets, mask, N);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::argmax_rows(int32_t* indices, const float* x, int64_t N, int V) {
  if (N == 0) return;
  FPDT_CHECK(N <= INT32_MAX, "kernels", "argmax_rows: " + std::to_string(N) + " rows exceed one grid", "");
  int32_t* device_indices = reinterpret_cast<int32_t*>(scratch(static_cast<size_t>(N)));  // (N)
  argmax_rows_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_>>>(device_indices, x, V);
  FPDT_CUDA_CHECK_LAUNCH();
  FPDT_CUDA_CHECK(cudaMemcpyAsync(indices, device_indices, sizeof(int32_t) * static_cast<size_t>(N),
                                  cudaMemcpyDeviceToHost, stream_));
  FPDT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::count_invalid(int64_t* count, const float* x, int64_t n, bool negative_invalid) {
  *count = 0;
  if (n == 0) return;
  auto* device_count = reinterpret_cast<unsigned long long*>(scratch(2));
  FPDT_CUDA_CHECK(cudaMemsetAsync(device_count, 0, sizeof *device_count, stream_));
  const unsigned grid = blocks_for(n) < 1024 ? blocks_for(n) : 1024;
  count_invalid_kernel<<<grid, kThreads, 0, stream_>>>(device_count, x, n, negative_invalid);
  FPDT_CUDA_CHECK_LAUNCH();
  unsigned long long host = 0;
  FPDT_CUDA_CHECK(cudaMemcpyAsync(&host, device_count, sizeof host, cudaMemcpyDeviceToHost, stream_));
  FPDT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  *count = static_cast<int64_t>(host);
}

}  // namespace fpdt::kernels::cuda

namespace fpdt::kernels {

std::string cuda_device_name() {
  int device = 0;
  FPDT_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp properties{};
  FPDT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

}  // namespace fpdt::kernels

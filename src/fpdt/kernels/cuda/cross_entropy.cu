// CUDA softmax cross-entropy with ignore index and loss mask (semantics: reference/cross_entropy.h).
// One block per row: max, Σexp, lse in fp32 (online per thread, merged across the block). The
// backward reads each logit before writing the same element in the same thread, so dlogits may
// alias logits. losses, lse, dlogits are overwritten (=).
#include <cmath>

#include "fpdt/base/cuda_check.h"
#include "fpdt/kernels/cuda/block_reduce.cuh"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"

namespace fpdt::kernels::cuda {

namespace {


__global__ void cross_entropy_forward_kernel(float* losses, float* lse, const float* logits, const int32_t* targets,
                                             const float* mask, int V) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const float* row = logits + n * V;
  float max = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) max = fmaxf(max, row[v]);
  max = block_max(max, scratch);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(row[v] - max);
  sum = block_sum(sum, scratch);
  if (threadIdx.x != 0) return;
  const float row_lse = max + logf(sum);
  lse[n] = row_lse;
  const int32_t target = targets[n];
  if (target == kIgnoreIndex) {
    losses[n] = 0.0f;
    return;
  }
  losses[n] = (mask ? mask[n] : 1.0f) * (row_lse - row[target]);
}

__global__ void cross_entropy_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                              const int32_t* targets, const float* mask, float dloss_scale, int V) {
  const int64_t n = blockIdx.x;
  const float* row = logits + n * V;
  float* drow = dlogits + n * V;
  const int32_t target = targets[n];
  if (target == kIgnoreIndex) {
    for (int v = threadIdx.x; v < V; v += blockDim.x) drow[v] = 0.0f;
    return;
  }
  const float weight = dloss_scale * (mask ? mask[n] : 1.0f);
  const float row_lse = lse[n];
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float p = expf(row[v] - row_lse);  // read before the write below
    drow[v] = weight * (p - (v == target ? 1.0f : 0.0f));
  }
}

}  // namespace

void CudaBackend::cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                        const float* mask, int64_t N, int V) {
  if (N == 0) return;
  cross_entropy_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_>>>(losses, lse, logits, targets, mask,
                                                                                  V);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                                         const int32_t* targets, const float* mask, double dloss_scale, int64_t N,
                                         int V) {
  if (N == 0) return;
  cross_entropy_backward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream_>>>(
      dlogits, logits, lse, targets, mask, static_cast<float>(dloss_scale), V);
  FPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace fpdt::kernels::cuda

// CUDA y += x over n floats (semantics: reference/elementwise.h add_inplace): the add of ZeRO's one-rank
// reduce-scatter with gradient accumulation (pipeline/model_states.cpp). One fp32 add per element, so
// the result is the cpu backend's, bit for bit.
#include "fpdt/base/cuda_check.h"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"

namespace fpdt::kernels::cuda {

namespace {

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

}  // namespace

void CudaBackend::add_inplace(float* y, const float* x, int64_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(y, x, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace fpdt::kernels::cuda

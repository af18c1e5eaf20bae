// The rank-order block sum on device memory (see nccl_sum.h): one thread per element, grid-strided.
#include <cuda_runtime.h>

#include <string>

#include "fpdt/base/error.h"
#include "fpdt/comm/nccl/nccl_sum.h"

namespace fpdt::comm::nccl {

namespace {

template <typename T>
__global__ void sum_blocks_kernel(T* dst, const T* blocks, size_t ranks, size_t n, bool add) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    T sum = blocks[i];
    for (size_t j = 1; j < ranks; ++j) sum += blocks[j * n + i];
    dst[i] = add ? dst[i] + sum : sum;
  }
}

template <typename T>
void launch(T* dst, const T* blocks, size_t ranks, size_t n, bool add, void* stream) {
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  const size_t wanted = (n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(wanted < 65535 ? wanted : 65535);
  sum_blocks_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(dst, blocks, ranks, n, add);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw Error("comm",
                std::string("the NCCL communicator's block sum failed to launch: ") + cudaGetErrorString(status),
                "check that a GPU is visible and the buffers are device memory");
}

}  // namespace

void sum_blocks_on_stream(float* dst, const float* blocks, size_t ranks, size_t n, bool add, void* stream) {
  launch(dst, blocks, ranks, n, add, stream);
}
void sum_blocks_on_stream(double* dst, const double* blocks, size_t ranks, size_t n, bool add, void* stream) {
  launch(dst, blocks, ranks, n, add, stream);
}

}  // namespace fpdt::comm::nccl

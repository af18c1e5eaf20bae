// Warp and block sums shared by the row kernels (norms, cross-entropy): every thread of the block
// gets the result. Block size is a multiple of 32, at most 1024. Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

namespace fpdt::kernels::cuda {

template <typename T>
__device__ inline T warp_sum(T value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

template <typename T>
__device__ inline T warp_max(T value) {
  for (int offset = 16; offset > 0; offset /= 2) value = max(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Sum over the block; `scratch` holds 32 values of T in shared memory. Ends with a barrier so the
// scratch can be reused by the next call.
template <typename T>
__device__ inline T block_sum(T value, T* scratch) {
  value = warp_sum(value);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}

template <typename T>
__device__ inline T block_max(T value, T* scratch) {
  value = warp_max(value);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : scratch[0];
  total = warp_max(total);
  __syncthreads();
  return total;
}

}  // namespace fpdt::kernels::cuda

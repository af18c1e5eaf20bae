// bf16 rounding in device code, one definition for every kernel that rounds: the nearest bf16 value of an
// fp32 value, ties to even (CUDA's __float2bfloat16_rn, the rule of tensor/dtype.h's round_to_bf16), held
// in an fp32 lane.
#pragma once

#include <cuda_bf16.h>

namespace fpdt::kernels::cuda {

__device__ inline float nearest_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

}  // namespace fpdt::kernels::cuda

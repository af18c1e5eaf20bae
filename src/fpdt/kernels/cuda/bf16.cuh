// bf16 in device code, one definition for every kernel: rounding — the nearest bf16 value of an fp32 value,
// ties to even (CUDA's __float2bfloat16_rn, the rule of tensor/dtype.h's round_to_bf16), held in an fp32
// lane or as its 16-bit word — and widening a word back to fp32, which is exact: the word is the fp32
// value's upper half, so a shift by 16 makes it, bit for bit and NaN payloads included (no conversion
// instruction whose handling of NaNs would need checking).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace fpdt::kernels::cuda {

__device__ inline float nearest_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ inline uint16_t bf16_word(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

__device__ inline float widen_bf16(uint16_t word) { return __uint_as_float(static_cast<uint32_t>(word) << 16); }

}  // namespace fpdt::kernels::cuda

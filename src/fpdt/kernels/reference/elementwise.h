// Reference reductions and scalings over flat arrays (the spec of the optimizer's helpers).
//   sum_squares:   Σ x[i]², accumulated in float64 (the Backend op: one such sum per block of the array)
//   scale_inplace: x[i] *= alpha
//   add_inplace:   y[i] += x[i]
//   round_to_bf16: x[i] = the nearest bf16 value, ties to even (fp32 only: tensor/dtype.h)
//   pack_bf16:     dst[i] = the bf16 word nearest src[i]; unpack_bf16: dst[i] = the float of word src[i]
//   count_invalid: the number of x[i] that are NaN or ±inf (or, with negative_invalid, < 0)
#pragma once

#include <cstdint>

namespace fpdt::kernels::reference {

template <typename T>
double sum_squares(const T* x, int64_t n);

template <typename T>
void scale_inplace(T* x, T alpha, int64_t n);

template <typename T>
void add_inplace(T* y, const T* x, int64_t n);

void round_to_bf16(float* x, int64_t n);
void pack_bf16(uint16_t* dst, const float* src, int64_t n);
void unpack_bf16(float* dst, const uint16_t* src, int64_t n);

template <typename T>
int64_t count_invalid(const T* x, int64_t n, bool negative_invalid);

}  // namespace fpdt::kernels::reference

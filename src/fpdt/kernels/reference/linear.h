// Reference linear layer (Hugging Face weight layout: w is (out, in)), forward and backward.
//   forward:  out (N, O) = x (N, I) · w^T (O, I) + bias (O)      (accumulate: out += ...)
//             bias may be null.
//   backward: dx (N, I) = dout · w    (accumulate_dx: dx += ...; dx may be null to skip it)
//             dw (O, I) += dout^T · x;  dbias (O) += column sums of dout (when non-null)
// The _bf16 forms are the bf16 spec (kernels/ops.h's Precision): x, w and dout enter each product
// rounded to bf16 (round_to_bf16, nearest-even), the sums accumulate as above; bias and dbias stay
// fp32, dbias summing dout as it came (unrounded).
#pragma once

#include <cstdint>

namespace fpdt::kernels::reference {

template <typename T>
void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int I, int O, bool accumulate);

template <typename T>
void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t N, int I, int O,
                     bool accumulate_dx);

void linear_forward_bf16(float* out, const float* x, const float* w, const float* bias, int64_t N, int I, int O,
                         bool accumulate);
void linear_backward_bf16(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                          int64_t N, int I, int O, bool accumulate_dx);

}  // namespace fpdt::kernels::reference

// Reference linear layer (Hugging Face weight layout: w is (out, in)), forward and backward.
//   forward:  out (N, O) = x (N, I) · w^T (O, I) + bias (O)      (accumulate: out += ...)
//             bias may be null.
//   backward: dx (N, I) = dout · w    (accumulate_dx: dx += ...; dx may be null to skip it)
//             dw (O, I) += dout^T · x;  dbias (O) += column sums of dout (when non-null)
#pragma once

#include <cstdint>

namespace fpdt::kernels::reference {

template <typename T>
void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int I, int O, bool accumulate);

template <typename T>
void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t N, int I, int O,
                     bool accumulate_dx);

}  // namespace fpdt::kernels::reference

// Reference RMSNorm and LayerNorm, forward and backward side by side (the spec).
//   rmsnorm_forward:   out (N, h) = x * rstd * weight;   rstd (N) = 1 / sqrt(mean(x^2) + eps)
//   rmsnorm_backward:  dx (N, h) += ...;  dweight (h) += ...
//   layernorm_forward: out (N, h) = (x - mean) * rstd * weight + bias;  mean, rstd (N)
//   layernorm_backward: dx (N, h) += ...;  dweight (h) += ...;  dbias (h) += ...
// dx accumulates because a norm's input is the residual stream, whose gradient already holds the
// contribution of the skip connection.
#pragma once

#include <cstdint>

namespace fpdt::kernels::reference {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* weight, int64_t N, int h, double eps);

template <typename T>
void rmsnorm_backward(T* dx, T* dweight, const T* dout, const T* x, const T* weight, const T* rstd,
                      int64_t N, int h);

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* weight, const T* bias, int64_t N,
                       int h, double eps);

template <typename T>
void layernorm_backward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int h);

}  // namespace fpdt::kernels::reference

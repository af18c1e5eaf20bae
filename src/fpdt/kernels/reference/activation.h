// Reference MLP activations, forward and backward (the spec). All arrays have n elements.
//   swiglu_forward:  out = silu(gate) * up,  silu(g) = g * sigmoid(g)
//   swiglu_backward: dgate = dout * up * silu'(gate);  dup = dout * silu(gate)      (both =)
//   gelu_forward:    out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (the tanh form)
//   gelu_backward:   dx = dout * gelu'(x)                                           (=)
#pragma once

#include <cstdint>

namespace fpdt::kernels::reference {

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n);

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

template <typename T>
void gelu_forward(T* out, const T* x, int64_t n);

template <typename T>
void gelu_backward(T* dx, const T* dout, const T* x, int64_t n);

}  // namespace fpdt::kernels::reference

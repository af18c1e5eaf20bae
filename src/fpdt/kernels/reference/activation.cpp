// Reference SwiGLU and GELU (tanh form), forward and backward (the spec; see activation.h).
// Elementwise and scalar; every value is computed in float64 and rounded to T once at the store.
// All outputs are overwritten (=).
#include "fpdt/kernels/reference/activation.h"

#include <cmath>

#include "fpdt/kernels/reference/elementwise.h"
#include "fpdt/kernels/reference/reference_backend.h"

namespace fpdt::kernels::reference {

namespace {

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double silu = g * sigmoid(g);
    out[i] = static_cast<T>(silu * static_cast<double>(up[i]));
  }
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double sig = sigmoid(g);
    const double silu = g * sig;
    const double dsilu = sig * (1.0 + g * (1.0 - sig));  // d/dg [g · sigmoid(g)]
    const double d = dout[i];
    dgate[i] = static_cast<T>(d * static_cast<double>(up[i]) * dsilu);
    dup[i] = static_cast<T>(d * silu);
  }
}

template <typename T>
void gelu_forward(T* out, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double u = kGeluC * (v + kGeluA * v * v * v);
    out[i] = static_cast<T>(0.5 * v * (1.0 + std::tanh(u)));
  }
}

template <typename T>
void gelu_backward(T* dx, const T* dout, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double u = kGeluC * (v + kGeluA * v * v * v);
    const double du = kGeluC * (1.0 + 3.0 * kGeluA * v * v);
    const double t = std::tanh(u);
    const double dgelu = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
    dx[i] = static_cast<T>(static_cast<double>(dout[i]) * dgelu);
  }
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, int64_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*, int64_t);
template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

// bf16 (backend_ops.inc): the fp32 op between the roundings, each reference::round_to_bf16.
void ReferenceBackend::swiglu_forward(float* out, float* gate, float* up, int64_t n, Precision precision) {
  const bool bf16 = precision == Precision::bf16;
  if (bf16) {
    reference::round_to_bf16(gate, n);
    reference::round_to_bf16(up, n);
  }
  reference::swiglu_forward(out, gate, up, n);
  if (bf16) reference::round_to_bf16(out, n);
}

void ReferenceBackend::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                       int64_t n, Precision precision) {
  reference::swiglu_backward(dgate, dup, dout, gate, up, n);
  if (precision == Precision::bf16) {
    reference::round_to_bf16(dgate, n);
    reference::round_to_bf16(dup, n);
  }
}

void ReferenceBackend::gelu_forward(float* out, float* x, int64_t n, Precision precision) {
  const bool bf16 = precision == Precision::bf16;
  if (bf16) reference::round_to_bf16(x, n);
  reference::gelu_forward(out, x, n);
  if (bf16) reference::round_to_bf16(out, n);
}

void ReferenceBackend::gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
  reference::gelu_backward(dx, dout, x, n);
}

}  // namespace fpdt::kernels::reference

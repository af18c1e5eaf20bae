// Reference linear layer (the spec; see linear.h), w in Hugging Face layout (out, in). Plain triple
// loops with double accumulators. out and dx are overwritten unless told to accumulate; dw and dbias
// always accumulate (+=). bias/dbias may be null (no bias); dx may be null (input needs no gradient).
#include "fpdt/kernels/reference/linear.h"

#include "fpdt/base/error.h"
#include "fpdt/kernels/reference/reference_backend.h"

namespace fpdt::kernels::reference {

template <typename T>
void linear_forward(T* out, const T* x, const T* w, const T* bias, int64_t N, int I, int O, bool accumulate) {
  for (int64_t n = 0; n < N; ++n) {
    const T* x_row = x + n * I;  // (I)
    T* out_row = out + n * O;    // (O)
    for (int o = 0; o < O; ++o) {
      const T* w_row = w + static_cast<int64_t>(o) * I;  // (I)
      double sum = bias ? static_cast<double>(bias[o]) : 0.0;
      for (int i = 0; i < I; ++i) sum += static_cast<double>(x_row[i]) * w_row[i];
      out_row[o] = static_cast<T>(accumulate ? out_row[o] + sum : sum);
    }
  }
}

template <typename T>
void linear_backward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t N, int I, int O,
                     bool accumulate_dx) {
  // dx (N, I) = dout (N, O) · w (O, I)
  if (dx) {
    for (int64_t n = 0; n < N; ++n) {
      const T* dout_row = dout + n * O;  // (O)
      T* dx_row = dx + n * I;            // (I)
      for (int i = 0; i < I; ++i) {
        double sum = 0.0;
        for (int o = 0; o < O; ++o) sum += static_cast<double>(dout_row[o]) * w[static_cast<int64_t>(o) * I + i];
        dx_row[i] = static_cast<T>(accumulate_dx ? dx_row[i] + sum : sum);
      }
    }
  }
  // dw (O, I) += dout^T (O, N) · x (N, I);  dbias (O) += Σ_n dout[n]
  for (int o = 0; o < O; ++o) {
    for (int i = 0; i < I; ++i) {
      double sum = 0.0;
      for (int64_t n = 0; n < N; ++n) sum += static_cast<double>(dout[n * O + o]) * x[n * I + i];
      T& dw_oi = dw[static_cast<int64_t>(o) * I + i];
      dw_oi = static_cast<T>(dw_oi + sum);
    }
    if (dbias) {
      double sum = 0.0;
      for (int64_t n = 0; n < N; ++n) sum += dout[n * O + o];
      dbias[o] = static_cast<T>(dbias[o] + sum);
    }
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int, int, bool);
template void linear_forward<double>(double*, const double*, const double*, const double*, int64_t, int, int,
                                     bool);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                     int, int, bool);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int64_t, int, int, bool);

void ReferenceBackend::linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I,
                                      int O, bool accumulate, Precision precision) {
  if (precision != Precision::fp32) throw Error("kernels", "linear_forward: bf16 is not built on the reference backend yet");
  reference::linear_forward(out, x, w, bias, N, I, O, accumulate);
}

void ReferenceBackend::linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                                       const float* w, int64_t N, int I, int O, bool accumulate_dx,
                                       Precision precision) {
  if (precision != Precision::fp32) throw Error("kernels", "linear_backward: bf16 is not built on the reference backend yet");
  reference::linear_backward(dx, dw, dbias, dout, x, w, N, I, O, accumulate_dx);
}

}  // namespace fpdt::kernels::reference

// Reference linear layer (the spec; see linear.h), w in Hugging Face layout (out, in). Plain triple
// loops with double accumulators. out and dx are overwritten unless told to accumulate; dw and dbias
// always accumulate (+=). bias/dbias may be null (no bias); dx may be null (input needs no gradient).
// bf16: the same loops over bf16-rounded copies of x, w and dout (ops.h's Precision).
#include "fpdt/kernels/reference/linear.h"

#include <vector>

#include "fpdt/kernels/reference/reference_backend.h"
#include "fpdt/tensor/dtype.h"

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

namespace {

// dbias (O) += Σ_n dout[n]   (dout (N, O))
template <typename T>
void add_column_sums(T* dbias, const T* dout, int64_t N, int O) {
  for (int o = 0; o < O; ++o) {
    double sum = 0.0;
    for (int64_t n = 0; n < N; ++n) sum += dout[n * O + o];
    dbias[o] = static_cast<T>(dbias[o] + sum);
  }
}

}  // namespace

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
  // dw (O, I) += dout^T (O, N) · x (N, I)
  for (int o = 0; o < O; ++o) {
    for (int i = 0; i < I; ++i) {
      double sum = 0.0;
      for (int64_t n = 0; n < N; ++n) sum += static_cast<double>(dout[n * O + o]) * x[n * I + i];
      T& dw_oi = dw[static_cast<int64_t>(o) * I + i];
      dw_oi = static_cast<T>(dw_oi + sum);
    }
  }
  // dbias (O) += Σ_n dout[n]
  if (dbias) add_column_sums(dbias, dout, N, O);
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int, int, bool);
template void linear_forward<double>(double*, const double*, const double*, const double*, int64_t, int, int,
                                     bool);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                     int, int, bool);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int64_t, int, int, bool);

namespace {

std::vector<float> bf16_rounded(const float* values, int64_t n) {
  std::vector<float> rounded(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rounded[i] = fpdt::round_to_bf16(values[i]);
  return rounded;
}

}  // namespace

void linear_forward_bf16(float* out, const float* x, const float* w, const float* bias, int64_t N, int I, int O,
                         bool accumulate) {
  const std::vector<float> x16 = bf16_rounded(x, N * I);                        // (N, I)
  const std::vector<float> w16 = bf16_rounded(w, static_cast<int64_t>(O) * I);  // (O, I)
  linear_forward(out, x16.data(), w16.data(), bias, N, I, O, accumulate);
}

void linear_backward_bf16(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                          int64_t N, int I, int O, bool accumulate_dx) {
  const std::vector<float> dout16 = bf16_rounded(dout, N * O);                  // (N, O)
  const std::vector<float> x16 = bf16_rounded(x, N * I);                        // (N, I)
  const std::vector<float> w16 = bf16_rounded(w, static_cast<int64_t>(O) * I);  // (O, I)
  linear_backward<float>(dx, dw, nullptr, dout16.data(), x16.data(), w16.data(), N, I, O, accumulate_dx);
  if (dbias) add_column_sums(dbias, dout, N, O);  // from dout as it came, not rounded
}

namespace {

// The fp32 values a product reads of w (O·I values): the bf16 words widened where a bf16 product is given
// them (exactly the rounded values, which the bf16 forms round again to themselves), else w's values.
const float* weight_values(const WeightMatrix& w, int64_t n, Precision precision, std::vector<float>& widened) {
  if (!w.reads_bf16(precision)) return w.values;
  widened.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) widened[static_cast<size_t>(i)] = fpdt::bf16_to_float(w.bf16[i]);
  return widened.data();
}

}  // namespace

void ReferenceBackend::linear_forward(float* out, const float* x, WeightMatrix w, const float* bias, int64_t N, int I,
                                      int O, bool accumulate, Precision precision) {
  std::vector<float> widened;
  const float* w_values = weight_values(w, int64_t{O} * I, precision, widened);  // (O, I)
  if (precision == Precision::bf16) {
    reference::linear_forward_bf16(out, x, w_values, bias, N, I, O, accumulate);
  } else {
    reference::linear_forward(out, x, w_values, bias, N, I, O, accumulate);
  }
}

void ReferenceBackend::linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                                       WeightMatrix w, LinearShape shape, bool accumulate_dx, Precision precision) {
  const auto [N, I, O] = shape;
  std::vector<float> widened;
  const float* w_values = weight_values(w, int64_t{O} * I, precision, widened);  // (O, I)
  if (precision == Precision::bf16) {
    reference::linear_backward_bf16(dx, dw, dbias, dout, x, w_values, N, I, O, accumulate_dx);
  } else {
    reference::linear_backward(dx, dw, dbias, dout, x, w_values, N, I, O, accumulate_dx);
  }
}

}  // namespace fpdt::kernels::reference

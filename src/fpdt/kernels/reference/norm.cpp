// Reference RMSNorm and LayerNorm, forward and backward (the spec; see norm.h). One row at a time,
// every reduction accumulated in double. dx, dweight, dbias accumulate (+=); out, mean, rstd are
// overwritten. The backward uses the mean/rstd saved by the forward, as the fast kernels do.
// LayerNorm's bias (forward) and dbias (backward) may be null: a LayerNorm without a bias.
#include "fpdt/kernels/reference/norm.h"

#include <cmath>

#include "fpdt/kernels/reference/reference_backend.h"

namespace fpdt::kernels::reference {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* weight, int64_t N, int h, double eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* x_row = x + n * h;  // (h)
    T* out_row = out + n * h;    // (h)
    double sum_sq = 0.0;
    for (int j = 0; j < h; ++j) sum_sq += static_cast<double>(x_row[j]) * x_row[j];
    const double r = 1.0 / std::sqrt(sum_sq / h + eps);
    for (int j = 0; j < h; ++j) out_row[j] = static_cast<T>(static_cast<double>(x_row[j]) * r * weight[j]);
    rstd[n] = static_cast<T>(r);
  }
}

// y_j = x_j · r · w_j with r = (mean(x²) + eps)^(-1/2), so ∂r/∂x_i = −r³ x_i / h and
//   dx_i = r · w_i · dy_i − (r³ / h) · x_i · Σ_j dy_j w_j x_j;    dw_j = Σ_rows dy_j · x_j · r.
template <typename T>
void rmsnorm_backward(T* dx, T* dweight, const T* dout, const T* x, const T* weight, const T* rstd,
                      int64_t N, int h) {
  for (int64_t n = 0; n < N; ++n) {
    const T* x_row = x + n * h;        // (h)
    const T* dout_row = dout + n * h;  // (h)
    T* dx_row = dx + n * h;            // (h)
    const double r = rstd[n];
    double dot = 0.0;  // Σ_j dy_j w_j x_j
    for (int j = 0; j < h; ++j) dot += static_cast<double>(dout_row[j]) * weight[j] * x_row[j];
    const double coeff = r * r * r * dot / h;
    for (int j = 0; j < h; ++j) {
      const double g = static_cast<double>(dout_row[j]) * weight[j] * r - coeff * x_row[j];
      dx_row[j] = static_cast<T>(dx_row[j] + g);
      dweight[j] = static_cast<T>(dweight[j] + static_cast<double>(dout_row[j]) * x_row[j] * r);
    }
  }
}

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* weight, const T* bias, int64_t N,
                       int h, double eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* x_row = x + n * h;  // (h)
    T* out_row = out + n * h;    // (h)
    double sum = 0.0;
    for (int j = 0; j < h; ++j) sum += x_row[j];
    const double mu = sum / h;
    double sum_sq = 0.0;  // two passes: the variance is not a difference of large numbers
    for (int j = 0; j < h; ++j) sum_sq += (x_row[j] - mu) * (x_row[j] - mu);
    const double r = 1.0 / std::sqrt(sum_sq / h + eps);
    for (int j = 0; j < h; ++j) {
      const double b = bias ? static_cast<double>(bias[j]) : 0.0;
      out_row[j] = static_cast<T>((x_row[j] - mu) * r * weight[j] + b);
    }
    mean[n] = static_cast<T>(mu);
    rstd[n] = static_cast<T>(r);
  }
}

// With x̂ = (x − mean) · r and g = dy ∘ w:
//   dx = r · (g − mean(g) − x̂ · mean(g ∘ x̂));   dw = Σ_rows dy ∘ x̂;   dbias = Σ_rows dy.
template <typename T>
void layernorm_backward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int h) {
  for (int64_t n = 0; n < N; ++n) {
    const T* x_row = x + n * h;        // (h)
    const T* dout_row = dout + n * h;  // (h)
    T* dx_row = dx + n * h;            // (h)
    const double mu = mean[n];
    const double r = rstd[n];
    double g_sum = 0.0, g_xhat_sum = 0.0;
    for (int j = 0; j < h; ++j) {
      const double xhat = (x_row[j] - mu) * r;
      const double g = static_cast<double>(dout_row[j]) * weight[j];
      g_sum += g;
      g_xhat_sum += g * xhat;
    }
    const double g_mean = g_sum / h, g_xhat_mean = g_xhat_sum / h;
    for (int j = 0; j < h; ++j) {
      const double xhat = (x_row[j] - mu) * r;
      const double g = static_cast<double>(dout_row[j]) * weight[j];
      dx_row[j] = static_cast<T>(dx_row[j] + r * (g - g_mean - xhat * g_xhat_mean));
      dweight[j] = static_cast<T>(dweight[j] + dout_row[j] * xhat);
      if (dbias) dbias[j] = static_cast<T>(dbias[j] + static_cast<double>(dout_row[j]));
    }
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t, int, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                      int64_t, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*,
                                       const double*, int64_t, int);
template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                       int, double);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                        int64_t, int, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, int64_t, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, int64_t, int);

void ReferenceBackend::rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int h,
                                       double eps) {
  reference::rmsnorm_forward(out, rstd, x, weight, N, h, eps);
}

void ReferenceBackend::rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x,
                                        const float* weight, const float* rstd, int64_t N, int h) {
  reference::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, N, h);
}

void ReferenceBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                                         const float* bias, int64_t N, int h, double eps) {
  reference::layernorm_forward(out, mean, rstd, x, weight, bias, N, h, eps);
}

void ReferenceBackend::layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                                          const float* weight, const float* mean, const float* rstd, int64_t N,
                                          int h) {
  reference::layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, N, h);
}

}  // namespace fpdt::kernels::reference

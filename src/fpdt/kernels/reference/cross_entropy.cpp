// Reference softmax cross-entropy with ignore index and loss mask (the spec; see cross_entropy.h).
// One row at a time, in float64: max, sum of exp, lse; the loss is lse − logit[target]. The
// backward reads each logit before writing the same element, so dlogits may alias logits.
#include "fpdt/kernels/reference/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "fpdt/kernels/reference/reference_backend.h"

namespace fpdt::kernels::reference {

template <typename T>
void cross_entropy_forward(T* losses, T* lse, const T* logits, const int32_t* targets, const T* mask,
                           int64_t N, int V) {
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    double max = -INFINITY;
    for (int v = 0; v < V; ++v) max = std::fmax(max, static_cast<double>(row[v]));
    double sum = 0.0;
    for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
    const double row_lse = max + std::log(sum);
    lse[n] = static_cast<T>(row_lse);

    const int32_t target = targets[n];
    if (target == kIgnoreIndex) {
      losses[n] = T(0);
      continue;
    }
    const double weight = mask ? static_cast<double>(mask[n]) : 1.0;
    losses[n] = static_cast<T>(weight * (row_lse - static_cast<double>(row[target])));
  }
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const int32_t* targets, const T* mask,
                            double dloss_scale, int64_t N, int V) {
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    T* drow = dlogits + n * V;
    const int32_t target = targets[n];
    if (target == kIgnoreIndex) {
      for (int v = 0; v < V; ++v) drow[v] = T(0);
      continue;
    }
    const double weight = dloss_scale * (mask ? static_cast<double>(mask[n]) : 1.0);
    const double row_lse = lse[n];
    for (int v = 0; v < V; ++v) {
      const double p = std::exp(static_cast<double>(row[v]) - row_lse);  // read before the write below
      const double onehot = v == target ? 1.0 : 0.0;
      drow[v] = static_cast<T>(weight * (p - onehot));
    }
  }
}

template <typename T>
void cross_entropy_sums(double* sums, const T* losses, const int32_t* targets, const T* mask, int64_t N) {
  double count = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    sums[0] += static_cast<double>(losses[n]);
    if (targets[n] != kIgnoreIndex) count += mask ? static_cast<double>(mask[n]) : 1.0;
  }
  sums[1] += count;
}

template <typename T>
void argmax_rows(int32_t* indices, const T* x, int64_t N, int V) {
  for (int64_t n = 0; n < N; ++n) {
    const T* row = x + n * V;
    indices[n] = static_cast<int32_t>(std::max_element(row, row + V) - row);
  }
}

template void cross_entropy_forward<float>(float*, float*, const float*, const int32_t*, const float*, int64_t,
                                           int);
template void cross_entropy_forward<double>(double*, double*, const double*, const int32_t*, const double*,
                                            int64_t, int);
template void cross_entropy_backward<float>(float*, const float*, const float*, const int32_t*, const float*,
                                            double, int64_t, int);
template void cross_entropy_backward<double>(double*, const double*, const double*, const int32_t*,
                                             const double*, double, int64_t, int);

template void cross_entropy_sums<float>(double*, const float*, const int32_t*, const float*, int64_t);
template void cross_entropy_sums<double>(double*, const double*, const int32_t*, const double*, int64_t);
template void argmax_rows<float>(int32_t*, const float*, int64_t, int);
template void argmax_rows<double>(int32_t*, const double*, int64_t, int);

void ReferenceBackend::cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                             const float* mask, int64_t N, int V) {
  reference::cross_entropy_forward(losses, lse, logits, targets, mask, N, V);
}

void ReferenceBackend::cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                                              const int32_t* targets, const float* mask, double dloss_scale,
                                              int64_t N, int V) {
  reference::cross_entropy_backward(dlogits, logits, lse, targets, mask, dloss_scale, N, V);
}

void ReferenceBackend::cross_entropy_sums(double* sums, const float* losses, const int32_t* targets, const float* mask,
                                          int64_t N) {
  reference::cross_entropy_sums(sums, losses, targets, mask, N);
}
void ReferenceBackend::argmax_rows(int32_t* indices, const float* x, int64_t N, int V) {
  reference::argmax_rows(indices, x, N, V);
}

}  // namespace fpdt::kernels::reference

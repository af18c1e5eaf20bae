// Reference sum of squares and in-place scaling (see elementwise.h).
#include "fpdt/kernels/reference/elementwise.h"

#include <algorithm>
#include <cmath>

#include "fpdt/kernels/reference/reference_backend.h"
#include "fpdt/tensor/dtype.h"

namespace fpdt::kernels::reference {

template <typename T>
double sum_squares(const T* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

template <typename T>
void scale_inplace(T* x, T alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

template <typename T>
void add_inplace(T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

template <typename T>
int64_t count_invalid(const T* x, int64_t n, bool negative_invalid) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += !std::isfinite(x[i]) || (negative_invalid && x[i] < T(0));
  return count;
}

template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);
template void scale_inplace<float>(float*, float, int64_t);
template void scale_inplace<double>(double*, double, int64_t);
void round_to_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = fpdt::round_to_bf16(x[i]);
}
void pack_bf16(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fpdt::float_to_bf16(src[i]);
}
void unpack_bf16(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fpdt::bf16_to_float(src[i]);
}

template void add_inplace<float>(float*, const float*, int64_t);
template void add_inplace<double>(double*, const double*, int64_t);
template int64_t count_invalid<float>(const float*, int64_t, bool);
template int64_t count_invalid<double>(const double*, int64_t, bool);

void ReferenceBackend::sum_squares(double* sums, const float* x, int64_t n, int64_t block) {
  for (int64_t begin = 0; begin < n; begin += block)
    sums[begin / block] = reference::sum_squares(x + begin, std::min(block, n - begin));
}

void ReferenceBackend::scale_inplace(float* x, float alpha, int64_t n) { reference::scale_inplace(x, alpha, n); }

void ReferenceBackend::add_inplace(float* y, const float* x, int64_t n) { reference::add_inplace(y, x, n); }
void ReferenceBackend::round_to_bf16(float* x, int64_t n) { reference::round_to_bf16(x, n); }
void ReferenceBackend::pack_bf16(uint16_t* dst, const float* src, int64_t n) { reference::pack_bf16(dst, src, n); }
void ReferenceBackend::unpack_bf16(float* dst, const uint16_t* src, int64_t n) { reference::unpack_bf16(dst, src, n); }

void ReferenceBackend::count_invalid(int64_t* count, const float* x, int64_t n, bool negative_invalid) {
  *count = reference::count_invalid(x, n, negative_invalid);
}

}  // namespace fpdt::kernels::reference

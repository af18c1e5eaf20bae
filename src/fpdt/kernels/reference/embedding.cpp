// Reference token/position embedding (the spec; see embedding.h): a row gather forward and a row
// scatter-add backward. Scalar and in input order, so duplicate ids accumulate deterministically.
//   forward: out = (or +=) table[ids[n]];   backward: dtable[ids[n]] += dout[n]
#include "fpdt/kernels/reference/embedding.h"

#include "fpdt/kernels/reference/reference_backend.h"

namespace fpdt::kernels::reference {

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int h, bool accumulate) {
  for (int64_t n = 0; n < N; ++n) {
    const T* row = table + static_cast<int64_t>(ids[n]) * h;  // (h)
    T* out_row = out + n * h;                                  // (h)
    for (int j = 0; j < h; ++j) out_row[j] = accumulate ? out_row[j] + row[j] : row[j];
  }
}

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int h) {
  for (int64_t n = 0; n < N; ++n) {
    T* drow = dtable + static_cast<int64_t>(ids[n]) * h;  // (h)
    const T* dout_row = dout + n * h;                      // (h)
    for (int j = 0; j < h; ++j) drow[j] += dout_row[j];
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int, bool);
template void embedding_forward<double>(double*, const int32_t*, const double*, int64_t, int, bool);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int);
template void embedding_backward<double>(double*, const double*, const int32_t*, int64_t, int);

void ReferenceBackend::embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int h,
                                         bool accumulate) {
  reference::embedding_forward(out, ids, table, N, h, accumulate);
}

void ReferenceBackend::embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) {
  reference::embedding_backward(dtable, dout, ids, N, h);
}

}  // namespace fpdt::kernels::reference

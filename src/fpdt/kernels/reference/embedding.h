// Reference token/position embedding, forward and backward. Scalar and readable: this is the spec.
//   forward:  out (N, h) = table[ids[n]]          (accumulate: out += table[ids[n]])
//   backward: dtable (V, h) += dout[n] scattered to row ids[n]
// ids are trusted (validated against V at the edge, by the model or data loader).
#pragma once

#include <cstdint>

namespace fpdt::kernels::reference {

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int h, bool accumulate);

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int h);

}  // namespace fpdt::kernels::reference

// Reference rotary position embedding, in place, forward and backward (the spec).
// x (N, H, D): for each token n and head, the first rotary_dim dims are rotated in "rotate-half"
// pairs (i, i + rotary_dim/2), i < rotary_dim/2, by the angle pos[n] · inv_freq[i] (RopeParams in
// ops.h; model/rope.h makes the table), with cos and sin both scaled by attention_scaling:
//   forward:  (a, b) <- s · (a cos − b sin, b cos + a sin),  s = attention_scaling
//   backward: the transpose, s · (inverse rotation), applied to the gradient in place.
// Dims rotary_dim..D-1 pass through (partial rotary, as GPT-NeoX / Phi). Angles are computed in
// float64 so long positions (millions) keep their precision. rotary_dim is even and <= D.
#pragma once

#include <cstdint>

#include "fpdt/kernels/ops.h"

namespace fpdt::kernels::reference {

template <typename T>
void rope_forward(T* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope);

template <typename T>
void rope_backward(T* dx, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope);

}  // namespace fpdt::kernels::reference

// Reference softmax cross-entropy over a vocabulary, with ignore index and loss mask (the spec).
//   forward:  lse (N) = logsumexp(logits[n, :]);  losses (N) = mask[n] · (lse[n] − logits[n, target[n]]),
//             and 0 where target[n] == kIgnoreIndex (−100). mask may be null (all ones).
//   backward: dlogits (N, V) = dloss_scale · mask[n] · (softmax(logits[n]) − onehot(target[n])),
//             0 on ignored rows. dlogits may alias logits (in place), so no (N, V) copy is needed.
//   sums:     sums[0] += losses[n] for n = 0, 1, … in order (float64); sums[1] += count, the float64 sum
//             of mask[n] (1 without a mask) over the rows whose target is not kIgnoreIndex.
//   argmax:   indices[n] = the first v with logits[n, v] ≥ every logits[n, :] (std::max_element's;
//             rows holding NaN: unspecified) — greedy decoding's prediction.
// The caller picks dloss_scale (e.g. 1 / number of counted tokens for a mean loss).
#pragma once

#include <cstdint>

#include "fpdt/kernels/ops.h"

namespace fpdt::kernels::reference {

template <typename T>
void cross_entropy_forward(T* losses, T* lse, const T* logits, const int32_t* targets, const T* mask,
                           int64_t N, int V);

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const int32_t* targets, const T* mask,
                            double dloss_scale, int64_t N, int V);

template <typename T>
void cross_entropy_sums(double* sums, const T* losses, const int32_t* targets, const T* mask, int64_t N);

template <typename T>
void argmax_rows(int32_t* indices, const T* x, int64_t N, int V);

}  // namespace fpdt::kernels::reference

// Reference dense causal attention with GQA — the oracle every fast attention is tested against.
// It materialises one (S, S) score row block per (batch, head) and is meant for short sequences.
//   params (ops.h BasicAttentionParams): q (B, S, H, D), k and v (B, S, Hkv, D); q head j reads kv head
//   j / (H / Hkv). doc_ids (B, S) or null, window 0 (none) or W > 0: token s attends token t only if
//   position_visible(s, t, window) (ops.h: t <= s, and s − t < W with a window) and doc_ids[s] == doc_ids[t].
//   forward:  out (B, S, H, D) = softmax(scale · q kᵀ + mask) v;  lse (B, H, S) = log-sum-exp of the
//             scaled, masked scores of each query row (fp32 on every backend's fast path).
//   backward: dq (B, S, H, D), dk and dv (B, S, Hkv, D), all overwritten (=), computed from the
//             final out and lse (Δ = rowsum(dout ∘ out)), as FlashAttention does.
//   precision: bf16 rounds the operands of each product exactly as the chunk spec does
//             (attention_chunk.h: r(q), r(k), r(v), r(P̃) with P̃ from the power-of-two max, r(dout),
//             r(P), r(dS)); a double input is rounded through float. Accumulation stays float64.
#pragma once

#include <cstdint>

#include "fpdt/kernels/ops.h"

namespace fpdt::kernels::reference {

template <typename T>
void attention_forward(T* out, T* lse, const BasicAttentionParams<T>& params);

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse,
                        const BasicAttentionParams<T>& params);

}  // namespace fpdt::kernels::reference

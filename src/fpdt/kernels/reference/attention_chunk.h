// Reference attention over one (q block, kv block) pair — the spec of the chunk kernels FPDT feeds
// block by block and merges by log-sum-exp. Scalar, float64 accumulation, readable.
//
// Masking (AttentionChunkParams in ops.h): key j of the kv block is visible from query i of the q
// block iff position_visible(q_begin + i, kv_begin + j, window) — causal by global position, within
// the sliding window if any — and, with document ids, q_doc_ids[b, i] == kv_doc_ids[b, j].
//   forward (accumulate = false): out (B, Cq, H, D), lse (B, H, Cq) = attention of each row over this
//     block's visible keys; a row with none gets out = 0, lse = −inf.
//   forward (accumulate = true): merges this block into the (out, lse) already there, exactly:
//     lse' = log(e^lse + e^lse_block), out' = out·e^(lse − lse') + out_block·e^(lse_block − lse');
//     rows with no visible key are left untouched.
//   delta (B, H, Cq) = rowsum(dout ∘ out) over D, from the FINAL out.
//   backward: dq (B, Cq, H, D) +=, dk, dv (B, Ck, Hkv, D) += this block's part of the exact gradient,
//     from the FINAL lse of the q rows (over every kv block) and their delta.
//
// Precision::bf16 (FlashAttention-2's recipe): r(x) is round_to_bf16 (dtype.h), each operand below is
// rounded once, every sum is accumulated in fp32 on the fast paths (float64 here), and everything not
// marked r(·) is unrounded:
//   forward, per row:  s_j = scale · r(q)·r(k_j);  m = max_j s_j;  m* = ln 2 · ⌈m / ln 2⌉;
//                      P̃_j = e^(s_j − m*);  l = Σ P̃_j;  out = Σ_j r(P̃_j)·r(v_j) / l;  lse = m* + ln l.
//     m* is the row max lifted to a power of two (an integer in log2 units), so r(P̃_j) does not depend
//     on which power of two a kernel subtracts: an online softmax that keeps its running max as an
//     integer in log2 units (⌈·⌉ of it) rounds exactly the same P̃ bits as this one pass (up to the
//     ulps of its fp32 scores, and P̃ below 2^−126, which bf16 units flush), whatever its tiling and
//     whatever block it merges into. The merge by LSE is fp32 as above; delta is unchanged
//     (unrounded dout and out).
//   backward, per (row, key j): P_j = e^(s_j − lse) (s_j as forward, lse the final one);
//     dP_j = r(dout)·r(v_j);  dS_j = P_j·(dP_j − delta);
//     dv_j += r(P_j)·r(dout);  dq += scale · Σ_j r(dS_j)·r(k_j);  dk_j += scale · r(dS_j)·r(q).
// With fp32, r is the identity and m* = m (exact: a lone visible key gets P̃ = 1, out = v bit for bit).
#pragma once

#include <cstdint>

#include "fpdt/kernels/ops.h"

namespace fpdt::kernels::reference {

void attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params, bool accumulate);
void attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H, int D);
void attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                              const float* delta, const AttentionChunkParams& params);

// m* of the bf16 spec above: the row max m (natural units) lifted to the next power of two,
// ln 2 · ⌈m / ln 2⌉. Shared by the full-sequence reference (attention.cpp).
double power_of_two_max(double m);

}  // namespace fpdt::kernels::reference

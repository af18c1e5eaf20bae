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
#pragma once

#include <cstdint>

#include "fpdt/kernels/ops.h"

namespace fpdt::kernels::reference {

void attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params, bool accumulate);
void attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H, int D);
void attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                              const float* delta, const AttentionChunkParams& params);

}  // namespace fpdt::kernels::reference

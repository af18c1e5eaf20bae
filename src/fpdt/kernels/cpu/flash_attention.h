// Flash attention on the CPU: exact (q block, kv block) kernels that FPDT feeds one chunk pair at a
// time, merged by log-sum-exp, and the full-sequence attention built on them (the cpu Backend's).
// Never materialises a (Cq, Ck) matrix: scratch is a few 96-token tiles per thread plus a capped packed
// copy of K/V or Q/dO (set_pack_budget_floats) — nothing grows with Cq·Ck.
// fp32 storage and compute, LSE in fp32; AVX2/FMA micro-kernels, OpenMP across tiles (see the .cpp).
//
// Masking (one rule for every block): key j of the kv block is visible from query i of the q block
// iff kv_begin + j <= q_begin + i (causal by *global* position) and, with document ids,
// q_doc_ids[b, i] == kv_doc_ids[b, j]. So a diagonal block is masked inside, a block below the
// diagonal is full, and a block above it (kv_begin > q_begin + Cq − 1) is skipped outright.
#pragma once

#include <cstdint>

#include "fpdt/kernels/reference/attention_chunk.h"

namespace fpdt::kernels::cpu {

// One (q block, kv block) pair: the struct every backend's chunk kernels take
// (reference/attention_chunk.h documents it field by field).
using AttentionChunkParams = kernels::AttentionChunkParams;

constexpr int kMinHeadDim = 1;    // nothing in the kernels depends on D's size or alignment
constexpr int kMaxHeadDim = 256;  // bounds the per-thread scratch (tuned and benchmarked for 32–256)

// Throws fpdt::Error ("[attention] …; hint: …") unless the shapes, pointers and scale are usable.
// Every entry point below calls it once; the kernels behind it trust the params.
void validate(const AttentionChunkParams& params);

// Forward of one block. out (B, Cq, H, D), lse (B, H, Cq), both fp32.
//   accumulate = false: out, lse = (overwritten) the attention of each q row over this block's visible
//     keys; a row that sees none gets out = 0, lse = −inf (the empty softmax, which merges as a no-op).
//   accumulate = true: out, lse already hold the result over other kv blocks (or 0 / −inf) and this
//     block is merged in exactly by LSE, so blocks may come in any order. A block (or a row) with
//     no visible key leaves out and lse untouched, bit for bit.
void attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params, bool accumulate);

// delta (B, H, Cq) = rowsum(dout ∘ out) over D (overwritten), from the FINAL out of the q rows.
void attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H, int D);

// Backward of one block, from the FINAL lse of the q rows (over all kv blocks) and their delta:
//   dq (B, Cq, H, D) += this block's part of dL/dq;  dk, dv (B, Ck, Hkv, D) += dL/dk, dL/dv.
// dout (B, Cq, H, D); lse, delta (B, H, Cq). Summing over all blocks gives the exact gradient.
// Deterministic: the result does not depend on the thread count or timing (dq sums its kv tiles in
// order). A fully masked block returns at once.
void attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse, const float* delta,
                              const AttentionChunkParams& params);

// The forward packs K and V, the backward Q and dO, of a batch of (b, kv head) groups into contiguous
// tiles before computing; each call's packed copy is capped at this many floats (default 8 Mi = 32 MiB,
// but at least one group: 2·Ck·D floats forward, about 2·Cq·D·H/Hkv backward). Returns the previous
// cap. Results do not depend on it (tests lower it to run many batches).
int64_t set_pack_budget_floats(int64_t floats);

// Full-sequence causal attention with the semantics (and signature) of reference/attention.h:
// one block with q_begin = kv_begin = 0 and the same document ids on both sides.
//   forward: out (B, S, Hq, D), lse (B, Hq, S) overwritten. backward: dq, dk, dv overwritten.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* doc_ids,
                       int B, int64_t S, int Hq, int Hkv, int D, double scale);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, const int32_t* doc_ids, int B, int64_t S,
                        int Hq, int Hkv, int D, double scale);

}  // namespace fpdt::kernels::cpu

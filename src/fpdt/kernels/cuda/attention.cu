// CUDA attention chunk kernels (semantics: reference/attention_chunk.h), the CUDA-core path: every block of
// an fp32 run, and the blocks of a bf16 run that cuDNN's fused attention does not take (sdpa_attention.cu
// is asked first) — and the reference the cuDNN rows of the conformance tests are held to. FlashAttention-2 style: a
// block owns 16 rows (4 warps × 4 rows), streams the other side in tiles of 32 rows through shared
// memory, and keeps an online softmax per row. Lane j scores tile row j (padded shared rows,
// conflict-free); lane t owns output dims t, t+32, … . Backward is two kernels, so nothing needs
// atomics: dQ (rows = q, tiles over kv) and dK/dV (rows = kv, tiles over q and over the q heads of the
// GQA group). Scores are recomputed in each. fp32 arithmetic throughout; in bf16 (ops.h Precision) each
// product's inputs are rounded to nearest bf16 — q, k, v and dO as their tiles reach shared memory, P
// before P·V and Pᵀ·dO, dS before dS·K and dSᵀ·Q — while the softmax statistics, LSE, Δ and the
// accumulators stay fp32; the forward's online softmax then runs in log2 units against a running max
// lifted to an integer (reference/attention_chunk.h's m*), so the P̃ it rounds are the spec's bits
// whatever the tiling. CUDA cores, not tensor cores (mma.sync is the next step). Head dim D ≤ 256
// (one instantiation per ⌈D/32⌉).
// Masking is ops.h's position_visible (causal, sliding window) plus document ids; each kernel streams
// only the tiles its rows can see by position, so with a window W the work per row is O(W).
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "fpdt/base/cuda_check.h"
#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/bf16.cuh"
#include "fpdt/kernels/cuda/block_reduce.cuh"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"

namespace fpdt::kernels::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // 16 rows per block
constexpr int kTile = 32;                          // rows of the streamed side per step (one per lane)
constexpr unsigned kFull = 0xffffffffu;
constexpr int64_t kMaxGridY = 65535;

__device__ inline bool visible(const AttentionChunkParams& p, int b, int64_t i, int64_t j) {
  if (!position_visible(p.q_begin + i, p.kv_begin + j, p.window)) return false;
  return p.q_doc_ids == nullptr || p.q_doc_ids[b * p.Cq + i] == p.kv_doc_ids[b * p.Ck + j];
}

// A product's input as the precision has it: itself in fp32, its nearest bf16 value in bf16. `bf16` is
// the same for every thread of a launch.
__device__ inline float product_input(float x, bool bf16) { return bf16 ? nearest_bf16(x) : x; }

// The rows of one (sequence, head) of a tensor that the kernels stream: q and dout (B, Cq, H, D), k and
// v (B, Ck, Hkv, D).
struct HeadRows {
  const float* tensor;  // (B, C, heads, D)
  int b;                // the sequence
  int64_t C;            // rows of each sequence
  int heads;
  int head;
  int D;
};

// Loads rows [first, first + rows) of src into shared memory with row stride `dst_stride` (zero past
// src.C), each value as product_input has it.
__device__ inline void load_rows(float* dst, int dst_stride, const HeadRows& src, int64_t first, int rows, bool bf16) {
  const int D = src.D;
  for (int idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    const int64_t i = first + r;
    dst[r * dst_stride + d] =
        i < src.C
            ? product_input(src.tensor[((src.b * src.C + i) * src.heads + src.head) * int64_t{D} + d], bf16)
            : 0.0f;
  }
}

__device__ inline float dot_shared(const float* a, const float* b, int D) {
  float sum = 0.0f;
  for (int d = 0; d < D; ++d) sum += a[d] * b[d];
  return sum;
}

// The kv rows [begin, end) that some q row of [row0, row0 + kBlockRows) can see by position.
__device__ inline void visible_kv_rows(const AttentionChunkParams& p, int64_t row0, int64_t* begin, int64_t* end) {
  const int64_t last_row = min(row0 + kBlockRows, p.Cq) - 1;
  *end = min(p.Ck, p.q_begin + last_row - p.kv_begin + 1);  // keys past it are above the diagonal for all rows
  *begin = p.window == 0 ? 0 : max(static_cast<int64_t>(0), p.q_begin + row0 - p.window + 1 - p.kv_begin);
}

// The kv side of the forward and the dQ kernel, written once: streams the kv tiles that the block's q
// rows [row0, row0 + kBlockRows) can see by position through k_s and v_s (kTile rows each, stride D + 1,
// as product_input has them) and, per tile, calls row_step(r, local, i, j) for each of this warp's q
// rows i < Cq — r: the row's index among the warp's kRowsPerWarp, local: its row of the block — with
// j = tile0 + lane, this lane's key (≥ Ck past the end). Every thread of the block calls it.
template <typename RowStep>
__device__ __forceinline__ void for_each_kv_tile(const AttentionChunkParams& p, int b, int kv_head, int64_t row0,
                                                 float* k_s, float* v_s, bool bf16, RowStep&& row_step) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const HeadRows k_rows{p.k, b, p.Ck, p.Hkv, kv_head, p.D};
  const HeadRows v_rows{p.v, b, p.Ck, p.Hkv, kv_head, p.D};
  int64_t kv_begin, kv_end;
  visible_kv_rows(p, row0, &kv_begin, &kv_end);
  for (int64_t tile0 = kv_begin; tile0 < kv_end; tile0 += kTile) {
    __syncthreads();
    load_rows(k_s, p.D + 1, k_rows, tile0, kTile, bf16);
    load_rows(v_s, p.D + 1, v_rows, tile0, kTile, bf16);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int local = warp * kRowsPerWarp + r;
      const int64_t i = row0 + local;
      if (i >= p.Cq) continue;  // warp-uniform
      row_step(r, local, i, tile0 + lane);
    }
  }
}

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Shared memory: q (16, D) | k (32, D+1) | v (32, D+1).
// The online softmax per row: scores s in its units — natural (fp32), log2 (bf16) — the running max m
// (in bf16 lifted to an integer, ⌈·⌉: the spec's m* = ln 2·⌈m / ln 2⌉, so a tile's P̃ = 2^(s − m) differ
// from the final anchor's by exact powers of two and round to the same bits), l = Σ P̃ (fp32, unrounded).
template <int kDL>
__global__ void __launch_bounds__(kWarps * 32)
    chunk_forward_kernel(float* out, float* lse, const AttentionChunkParams p, bool accumulate) {
  extern __shared__ float smem[];
  const int D = p.D;
  float* q_s = smem;
  float* k_s = q_s + kBlockRows * D;
  float* v_s = k_s + kTile * (D + 1);
  const int b = blockIdx.y / p.H, head = blockIdx.y % p.H, kv_head = head / (p.H / p.Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const bool bf16 = p.precision == Precision::bf16;
  const float score_scale = static_cast<float>(p.scale) * (bf16 ? kLog2e : 1.0f);
  auto softmax_exp = [bf16](float x) { return bf16 ? exp2f(x) : expf(x); };
  load_rows(q_s, D, HeadRows{p.q, b, p.Cq, p.H, head, D}, row0, kBlockRows, bf16);

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int t = 0; t < kDL; ++t) acc[r][t] = 0.0f;
  }
  for_each_kv_tile(p, b, kv_head, row0, k_s, v_s, bf16, [&](int r, int local, int64_t i, int64_t j) {
    float s = -INFINITY;
    if (j < p.Ck && visible(p, b, i, j)) s = score_scale * dot_shared(q_s + local * D, k_s + lane * (D + 1), D);
    float m_new = fmaxf(m[r], warp_max(s));
    if (m_new == -INFINITY) return;  // nothing visible yet (warp-uniform)
    if (bf16) m_new = ceilf(m_new);
    const float prob = s == -INFINITY ? 0.0f : softmax_exp(s - m_new);
    const float correction = softmax_exp(m[r] - m_new);
    l[r] = l[r] * correction + warp_sum(prob);  // the fp32 probabilities
    const float prob_input = product_input(prob, bf16);
#pragma unroll
    for (int t = 0; t < kDL; ++t) acc[r][t] *= correction;
    for (int jj = 0; jj < kTile; ++jj) {
      const float pj = __shfl_sync(kFull, prob_input, jj);
      if (pj == 0.0f) continue;  // warp-uniform
#pragma unroll
      for (int t = 0; t < kDL; ++t) {
        const int d = lane + 32 * t;
        if (d < D) acc[r][t] += pj * v_s[jj * (D + 1) + d];
      }
    }
    m[r] = m_new;
  });

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + warp * kRowsPerWarp + r;
    if (i >= p.Cq) continue;
    float* out_row = out + ((b * p.Cq + i) * p.H + head) * static_cast<int64_t>(D);
    float* row_lse = lse + (static_cast<int64_t>(b) * p.H + head) * p.Cq + i;
    if (l[r] == 0.0f) {  // no visible key: the empty softmax
      if (!accumulate) {
#pragma unroll
        for (int t = 0; t < kDL; ++t)
          if (lane + 32 * t < D) out_row[lane + 32 * t] = 0.0f;
        if (lane == 0) *row_lse = -INFINITY;
      }
      continue;
    }
    const float block_lse = (bf16 ? m[r] * kLn2 : m[r]) + logf(l[r]);  // natural units
    const float old_lse = accumulate ? *row_lse : -INFINITY;
    __syncwarp();  // every lane has read the old lse before lane 0 overwrites it
    if (old_lse == -INFINITY) {
#pragma unroll
      for (int t = 0; t < kDL; ++t)
        if (lane + 32 * t < D) out_row[lane + 32 * t] = acc[r][t] / l[r];
      if (lane == 0) *row_lse = block_lse;
      continue;
    }
    const float new_lse = fmaxf(old_lse, block_lse) + log1pf(expf(-fabsf(old_lse - block_lse)));
    const float keep = expf(old_lse - new_lse), add = expf(block_lse - new_lse) / l[r];
#pragma unroll
    for (int t = 0; t < kDL; ++t) {
      const int d = lane + 32 * t;
      if (d < D) out_row[d] = out_row[d] * keep + acc[r][t] * add;
    }
    if (lane == 0) *row_lse = new_lse;
  }
}

// One warp per (b, i, head) row: delta = Σ_d dout ∘ out.
__global__ void chunk_delta_kernel(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H,
                                   int D) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;  // (b·Cq + i)·H + head
  const int lane = threadIdx.x % 32;
  if (row >= B * Cq * H) return;
  float sum = 0.0f;
  for (int d = lane; d < D; d += 32) sum += dout[row * D + d] * out[row * D + d];
  sum = warp_sum(sum);
  if (lane == 0) {
    const int64_t head = row % H, bi = row / H, b = bi / Cq, i = bi % Cq;
    delta[(b * H + head) * Cq + i] = sum;
  }
}

// dQ: rows are q rows, tiles stream kv. Shared: q (16, D) | dout (16, D) | k (32, D+1) | v (32, D+1).
template <int kDL>
__global__ void __launch_bounds__(kWarps * 32)
    chunk_backward_dq_kernel(float* dq, const float* dout, const float* lse, const float* delta,
                             const AttentionChunkParams p) {
  extern __shared__ float smem[];
  const int D = p.D;
  float* q_s = smem;
  float* do_s = q_s + kBlockRows * D;
  float* k_s = do_s + kBlockRows * D;
  float* v_s = k_s + kTile * (D + 1);
  const int b = blockIdx.y / p.H, head = blockIdx.y % p.H, kv_head = head / (p.H / p.Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const bool bf16 = p.precision == Precision::bf16;
  load_rows(q_s, D, HeadRows{p.q, b, p.Cq, p.H, head, D}, row0, kBlockRows, bf16);
  load_rows(do_s, D, HeadRows{dout, b, p.Cq, p.H, head, D}, row0, kBlockRows, bf16);

  float acc[kRowsPerWarp][kDL];
  float row_lse[kRowsPerWarp], row_delta[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + warp * kRowsPerWarp + r;
    const int64_t stat = (static_cast<int64_t>(b) * p.H + head) * p.Cq + i;
    row_lse[r] = i < p.Cq ? lse[stat] : -INFINITY;
    row_delta[r] = i < p.Cq ? delta[stat] : 0.0f;
#pragma unroll
    for (int t = 0; t < kDL; ++t) acc[r][t] = 0.0f;
  }
  for_each_kv_tile(p, b, kv_head, row0, k_s, v_s, bf16, [&](int r, int local, int64_t i, int64_t j) {
    if (row_lse[r] == -INFINITY) return;  // no visible key (warp-uniform)
    float dscore = 0.0f;
    if (j < p.Ck && visible(p, b, i, j)) {
      const float prob =
          expf(static_cast<float>(p.scale) * dot_shared(q_s + local * D, k_s + lane * (D + 1), D) - row_lse[r]);
      const float dprob = dot_shared(do_s + local * D, v_s + lane * (D + 1), D);
      dscore = product_input(prob * (dprob - row_delta[r]), bf16);
    }
    for (int jj = 0; jj < kTile; ++jj) {
      const float ds = __shfl_sync(kFull, dscore, jj);
      if (ds == 0.0f) continue;  // warp-uniform
#pragma unroll
      for (int t = 0; t < kDL; ++t) {
        const int d = lane + 32 * t;
        if (d < D) acc[r][t] += ds * k_s[jj * (D + 1) + d];
      }
    }
  });
  const float scale = static_cast<float>(p.scale);
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + warp * kRowsPerWarp + r;
    if (i >= p.Cq) continue;
    float* dq_row = dq + ((b * p.Cq + i) * p.H + head) * static_cast<int64_t>(D);
#pragma unroll
    for (int t = 0; t < kDL; ++t)
      if (lane + 32 * t < D) dq_row[lane + 32 * t] += scale * acc[r][t];
  }
}

// dK, dV: rows are kv rows of one kv head, tiles stream q rows of every q head of its GQA group.
// Shared: k (16, D) | v (16, D) | q (32, D+1) | dout (32, D+1) | lse (32) | delta (32).
template <int kDL>
__global__ void __launch_bounds__(kWarps * 32)
    chunk_backward_dkdv_kernel(float* dk, float* dv, const float* dout, const float* lse, const float* delta,
                               const AttentionChunkParams p) {
  extern __shared__ float smem[];
  const int D = p.D;
  float* k_s = smem;
  float* v_s = k_s + kBlockRows * D;
  float* q_s = v_s + kBlockRows * D;
  float* do_s = q_s + kTile * (D + 1);
  float* lse_s = do_s + kTile * (D + 1);
  float* delta_s = lse_s + kTile;
  const int b = blockIdx.y / p.Hkv, kv_head = blockIdx.y % p.Hkv, group = p.H / p.Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const bool bf16 = p.precision == Precision::bf16;
  load_rows(k_s, D, HeadRows{p.k, b, p.Ck, p.Hkv, kv_head, D}, row0, kBlockRows, bf16);
  load_rows(v_s, D, HeadRows{p.v, b, p.Ck, p.Hkv, kv_head, D}, row0, kBlockRows, bf16);

  float dk_acc[kRowsPerWarp][kDL], dv_acc[kRowsPerWarp][kDL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int t = 0; t < kDL; ++t) dk_acc[r][t] = dv_acc[r][t] = 0.0f;
  // q rows before q_first see none of this block's keys (causal by global position); with a window, nor
  // do the rows from q_end on.
  const int64_t q_first = max(static_cast<int64_t>(0), p.kv_begin + row0 - p.q_begin);
  const int64_t last_key = min(row0 + kBlockRows, p.Ck) - 1;
  const int64_t q_end = p.window == 0 ? p.Cq : min(p.Cq, p.kv_begin + last_key + p.window - p.q_begin);
  const float scale = static_cast<float>(p.scale);
  for (int g = 0; g < group; ++g) {
    const int head = kv_head * group + g;
    for (int64_t tile0 = q_first; tile0 < q_end; tile0 += kTile) {
      __syncthreads();
      load_rows(q_s, D + 1, HeadRows{p.q, b, p.Cq, p.H, head, D}, tile0, kTile, bf16);
      load_rows(do_s, D + 1, HeadRows{dout, b, p.Cq, p.H, head, D}, tile0, kTile, bf16);
      if (threadIdx.x < kTile) {
        const int64_t i = tile0 + threadIdx.x;
        const int64_t stat = (static_cast<int64_t>(b) * p.H + head) * p.Cq + i;
        lse_s[threadIdx.x] = i < p.Cq ? lse[stat] : -INFINITY;
        delta_s[threadIdx.x] = i < p.Cq ? delta[stat] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int local = warp * kRowsPerWarp + r;
        const int64_t j = row0 + local;
        if (j >= p.Ck) continue;  // warp-uniform
        const int64_t i = tile0 + lane;
        float prob = 0.0f, dscore = 0.0f;  // as the products dV += P·dO and dK += dS·Q take them
        if (i < p.Cq && lse_s[lane] != -INFINITY && visible(p, b, i, j)) {
          const float fp32_prob = expf(scale * dot_shared(q_s + lane * (D + 1), k_s + local * D, D) - lse_s[lane]);
          const float dprob = dot_shared(do_s + lane * (D + 1), v_s + local * D, D);
          prob = product_input(fp32_prob, bf16);
          dscore = product_input(fp32_prob * (dprob - delta_s[lane]), bf16);
        }
        // Unrolled at most 4 deep: fully unrolled, the 32 steps of D = 64 (kDL = 2) took 255 registers and
        // spilled 572 bytes (ptxas -v, sm_90); 4 deep it needs no spill at any head dim.
#pragma unroll 4
        for (int ii = 0; ii < kTile; ++ii) {
          const float pi = __shfl_sync(kFull, prob, ii);
          const float ds = __shfl_sync(kFull, dscore, ii);
          if (pi == 0.0f && ds == 0.0f) continue;  // warp-uniform
#pragma unroll
          for (int t = 0; t < kDL; ++t) {
            const int d = lane + 32 * t;
            if (d < D) {
              dv_acc[r][t] += pi * do_s[ii * (D + 1) + d];
              dk_acc[r][t] += ds * q_s[ii * (D + 1) + d];
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t j = row0 + warp * kRowsPerWarp + r;
    if (j >= p.Ck) continue;
    const int64_t offset = ((b * p.Ck + j) * p.Hkv + kv_head) * static_cast<int64_t>(D);
#pragma unroll
    for (int t = 0; t < kDL; ++t) {
      const int d = lane + 32 * t;
      if (d < D) {
        dk[offset + d] += scale * dk_acc[r][t];
        dv[offset + d] += dv_acc[r][t];
      }
    }
  }
}

size_t forward_smem_bytes(int D) { return sizeof(float) * (kBlockRows * D + 2 * kTile * (D + 1)); }
size_t dq_smem_bytes(int D) { return sizeof(float) * (2 * kBlockRows * D + 2 * kTile * (D + 1)); }
size_t dkdv_smem_bytes(int D) { return sizeof(float) * (2 * kBlockRows * D + 2 * kTile * (D + 1) + 2 * kTile); }

// The one place where the runtime head dim becomes a compile-time constant: ⌈D/32⌉ ∈ {1, 2, 4, 8}.
template <typename F>
void dispatch_head_dim(int D, F&& f) {
  if (D <= 32) return f(std::integral_constant<int, 1>{});
  if (D <= 64) return f(std::integral_constant<int, 2>{});
  if (D <= 128) return f(std::integral_constant<int, 4>{});
  if (D <= kMaxHeadDim) return f(std::integral_constant<int, 8>{});
  throw Error("kernels", "CUDA attention supports head dim D <= 256, got " + std::to_string(D),
              "use --backend cpu for this model");
}

dim3 grid(int64_t rows, int heads_times_batch) {
  return dim3(static_cast<unsigned>((rows + kBlockRows - 1) / kBlockRows), static_cast<unsigned>(heads_times_batch));
}

// Throws fpdt::Error unless the CUDA kernels can run this block (every entry point calls it once).
void validate(const AttentionChunkParams& p) {
  FPDT_CHECK(p.Hkv > 0 && p.H % p.Hkv == 0, "kernels",
             "attention needs H a multiple of Hkv, got H=" + std::to_string(p.H) + " Hkv=" + std::to_string(p.Hkv), "");
  FPDT_CHECK(p.D > 0 && p.D <= kMaxHeadDim, "kernels",
             "CUDA attention supports head dim 1.." + std::to_string(kMaxHeadDim) + ", got " + std::to_string(p.D),
             "use --backend cpu");
  FPDT_CHECK((p.q_doc_ids == nullptr) == (p.kv_doc_ids == nullptr), "kernels",
             "attention chunk: q_doc_ids and kv_doc_ids must both be set or both null", "");
  FPDT_CHECK(p.window >= 0, "kernels", "negative sliding window " + std::to_string(p.window),
             "use 0 for no window, or the window in tokens");
  FPDT_CHECK((p.k_words == nullptr) == (p.v_words == nullptr) && (p.k_words == nullptr || p.k == nullptr),
             "kernels", "attention chunk: K and V as bf16 words need both words, and neither k nor v", "");
  // grid.y is (batch, head): at most 65,535 blocks (grid.x, the rows, may be far larger).
  FPDT_CHECK(static_cast<int64_t>(p.B) * p.H <= kMaxGridY, "kernels",
             "CUDA attention runs one block row per (sequence, head): B·H = " + std::to_string(p.B) + "·" +
                 std::to_string(p.H) + " exceeds " + std::to_string(kMaxGridY),
             "use fewer sequences per micro-batch (B)");
}

}  // namespace

void CudaBackend::configure_attention() {
  for (int D : {32, 64, 128, kMaxHeadDim})
    dispatch_head_dim(D, [&](auto dl) {
      constexpr int kDL = decltype(dl)::value;
      FPDT_CUDA_CHECK(cudaFuncSetAttribute(chunk_forward_kernel<kDL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(forward_smem_bytes(D))));
      FPDT_CUDA_CHECK(cudaFuncSetAttribute(chunk_backward_dq_kernel<kDL>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(dq_smem_bytes(D))));
      FPDT_CUDA_CHECK(cudaFuncSetAttribute(chunk_backward_dkdv_kernel<kDL>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(dkdv_smem_bytes(D))));
    });
}

void CudaBackend::attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params,
                                          bool accumulate) {
  validate(params);
  if (params.B == 0 || params.Cq == 0) return;
  if (sdpa_chunk_forward(out, lse, params, accumulate)) return;  // cuDNN's fused attention took it (K, V words read)
  if (params.k_words != nullptr) {  // K and V as bf16 words: widened into the scratch (free in a forward)
    const int64_t n = kv_values(params);
    float* widened = scratch(2 * static_cast<size_t>(n));
    unpack_bf16(widened, params.k_words, n);
    unpack_bf16(widened + n, params.v_words, n);
    attention_chunk_forward(out, lse, with_widened_kv(params, widened), accumulate);
    return;
  }
  dispatch_head_dim(params.D, [&](auto dl) {
    constexpr int kDL = decltype(dl)::value;
    chunk_forward_kernel<kDL><<<grid(params.Cq, params.B * params.H), kWarps * 32, forward_smem_bytes(params.D),
                                stream_>>>(out, lse, params, accumulate);
    FPDT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H,
                                        int D) {
  const int64_t rows = B * Cq * H;
  if (rows == 0) return;
  constexpr int kRowsPerBlock = 8;  // 8 warps
  chunk_delta_kernel<<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * 32, 0,
                       stream_>>>(delta, dout, out, B, Cq, H, D);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                           const float* delta, const AttentionChunkParams& params) {
  validate(params);
  FPDT_CHECK(params.k_words == nullptr, "kernels", "K and V as bf16 words are for the forward only", "");
  if (params.B == 0 || !block_has_visible_pair(params.q_begin, params.Cq, params.kv_begin, params.Ck, params.window))
    return;
  if (sdpa_chunk_backward(dq, dk, dv, dout, lse, delta, params)) return;  // cuDNN's fused attention took it
  dispatch_head_dim(params.D, [&](auto dl) {
    constexpr int kDL = decltype(dl)::value;
    chunk_backward_dq_kernel<kDL><<<grid(params.Cq, params.B * params.H), kWarps * 32, dq_smem_bytes(params.D),
                                    stream_>>>(dq, dout, lse, delta, params);
    FPDT_CUDA_CHECK_LAUNCH();
    chunk_backward_dkdv_kernel<kDL><<<grid(params.Ck, params.B * params.Hkv), kWarps * 32,
                                      dkdv_smem_bytes(params.D), stream_>>>(dk, dv, dout, lse, delta, params);
    FPDT_CUDA_CHECK_LAUNCH();
  });
}

// Full-sequence attention = one chunk pair (q block = kv block = the whole sequence).
void CudaBackend::attention_forward(float* out, float* lse, const AttentionParams& params) {
  attention_chunk_forward(out, lse, whole_sequence_block(params), false);
}

void CudaBackend::attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                     const float* lse, const AttentionParams& params) {
  const AttentionChunkParams block = whole_sequence_block(params);
  validate(block);
  const int B = params.B, H = params.H, Hkv = params.Hkv, D = params.D;
  const int64_t S = params.S;
  float* delta = scratch(static_cast<size_t>(B) * H * S);  // (B, H, S)
  FPDT_CUDA_CHECK(cudaMemsetAsync(dq, 0, sizeof(float) * B * S * H * D, stream_));
  FPDT_CUDA_CHECK(cudaMemsetAsync(dk, 0, sizeof(float) * B * S * Hkv * D, stream_));
  FPDT_CUDA_CHECK(cudaMemsetAsync(dv, 0, sizeof(float) * B * S * Hkv * D, stream_));
  attention_chunk_delta(delta, dout, out, B, S, H, D);
  attention_chunk_backward(dq, dk, dv, dout, lse, delta, block);
}

}  // namespace fpdt::kernels::cuda

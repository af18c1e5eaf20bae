// Attention blocks on cuDNN's fused attention (cudnn_sdpa.h), the tensor-core path of a bf16 run: the glue
// between the backend's fp32 tensors and cuDNN's bf16 operands. Forward: q, k, v packed to bf16 words
// (round to nearest, the spec's r(q), r(k), r(v)) — K and V given as words (a bf16 KV cache) read as they are,
// the same words; cuDNN gives the block's o (bf16) and LSE (fp32); the
// block is merged into out and lse by LSE exactly as attention.cu merges its own (= or +=). Backward from
// the q chunk's merged out and LSE: cuDNN's graph reads O only for Δ = rowsum(dO ∘ O), which the pipeline
// has already computed (attention_chunk_delta), so cuDNN is given an O' with rowsum(r(dO) ∘ O') = Δ (below);
// its dq, dk, dv (bf16) are added to the fp32 accumulators (+=). When plan_sdpa or cuDNN refuses a block,
// the functions return false and attention.cu's CUDA-core kernel runs it.
// Deviations from the bf16 spec (reference/attention_chunk.h), each bounded in backend_ops_cuda_test.cpp:
// the block's o and the block's dq, dk, dv leave cuDNN rounded to bf16 (one rounding, u = 2^-8, each);
// P̃ is rounded from cuDNN's own max, not the spec's integer-lifted one; sums are the tensor cores'.
#include <cmath>
#include <cstdint>

#include "fpdt/base/cuda_check.h"
#include "fpdt/kernels/cuda/bf16.cuh"
#include "fpdt/kernels/cuda/block_reduce.cuh"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"
#include "fpdt/kernels/cuda/cudnn_sdpa.h"

namespace fpdt::kernels::cuda {

namespace {

constexpr int kRowWarps = 8;  // rows (one warp each) per block of the row kernels

// out, lse (B, Cq, H, D), (B, H, Cq) = the block's (o, block_lse), or merged with them by LSE (accumulate):
// lse' = log(e^lse + e^block_lse), out' = out·e^(lse − lse') + o·e^(block_lse − lse'). One warp per row.
__global__ void merge_block_kernel(float* out, float* lse, const uint16_t* block_o, const float* block_lse, int B,
                                   int64_t Cq, int H, int D, bool accumulate) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;  // (b·Cq + i)·H + head
  const int lane = threadIdx.x % 32;
  if (row >= B * Cq * H) return;
  const int64_t head = row % H, bi = row / H, b = bi / Cq, i = bi % Cq;
  const int64_t stat = (b * H + head) * Cq + i;
  const float add_lse = block_lse[stat];
  const float old_lse = accumulate ? lse[stat] : -INFINITY;
  __syncwarp();  // every lane has read the old lse before lane 0 overwrites it
  float* out_row = out + row * D;
  const uint16_t* o_row = block_o + row * D;
  if (add_lse == -INFINITY) {  // no visible key in this block (plan_sdpa keeps such blocks from cuDNN)
    if (!accumulate) {
      for (int d = lane; d < D; d += 32) out_row[d] = 0.0f;
      if (lane == 0) lse[stat] = -INFINITY;
    }
    return;
  }
  if (old_lse == -INFINITY) {
    for (int d = lane; d < D; d += 32) out_row[d] = widen_bf16(o_row[d]);
    if (lane == 0) lse[stat] = add_lse;
    return;
  }
  const float new_lse = fmaxf(old_lse, add_lse) + log1pf(expf(-fabsf(old_lse - add_lse)));
  const float keep = expf(old_lse - new_lse), add = expf(add_lse - new_lse);
  for (int d = lane; d < D; d += 32) out_row[d] = out_row[d] * keep + widen_bf16(o_row[d]) * add;
  if (lane == 0) lse[stat] = new_lse;
}

// The backward's row operands, one warp per row: dO = r(dout) as bf16 words, and O' (bf16 words) with
// rowsum(r(dO) ∘ O') = Δ. With g = r(dout) of the row and n = max|g|: O' = (Δ / n)·(g / n) / Σ(g / n)²,
// so Σ g·O' = Δ·Σg² / (n²·Σ(g/n)²) = Δ. Scaling by n keeps every intermediate finite (|Δ| ≤ ‖dout‖‖out‖, so
// |Δ / n| ≤ √D·‖out‖; Σ(g/n)² ∈ [1, D]). Rounding O' to bf16 moves each term of Σ g·O' by at most u of itself,
// and every term has Δ's sign: cuDNN's row sum is Δ within u·|Δ| (plus its fp32 sum), where the product of
// r(dO) and r(out) would be off by u·Σ|dO·out|, no less. A row with dout = 0 has Δ = 0: O' = 0.
__global__ void backward_rows_kernel(uint16_t* dO, uint16_t* o_for_delta, const float* dout, const float* delta, int B,
                                     int64_t Cq, int H, int D) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= B * Cq * H) return;
  const int64_t head = row % H, bi = row / H, b = bi / Cq, i = bi % Cq;
  const float row_delta = delta[(b * H + head) * Cq + i];
  const float* g_row = dout + row * D;
  float largest = 0.0f;
  for (int d = lane; d < D; d += 32) largest = fmaxf(largest, fabsf(nearest_bf16(g_row[d])));
  largest = warp_max(largest);
  float squares = 0.0f;
  if (largest > 0.0f)
    for (int d = lane; d < D; d += 32) {
      const float scaled = nearest_bf16(g_row[d]) / largest;
      squares += scaled * scaled;
    }
  squares = warp_sum(squares);
  const float factor = largest > 0.0f ? row_delta / largest / squares : 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float g = nearest_bf16(g_row[d]);
    dO[row * D + d] = bf16_word(g);
    o_for_delta[row * D + d] = bf16_word(largest > 0.0f ? factor * (g / largest) : 0.0f);
  }
}

// y (n) += the widened bf16 words x (n).
__global__ void add_widened_kernel(float* y, const uint16_t* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += widen_bf16(x[i]);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps); }

// Consecutive pieces of one scratch allocation, each 256-byte aligned (cuDNN wants 16 bytes at least).
class ScratchLayout {
 public:
  size_t add(size_t bytes) {
    const size_t offset = bytes_;
    bytes_ += (bytes + 255) / 256 * 256;
    return offset;
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

}  // namespace

bool CudaBackend::sdpa_takes(const AttentionChunkParams& p, bool backward) {
  const SdpaDecision decision = plan_sdpa(p);
  if (!decision.tries_cudnn()) return false;
  size_t workspace_bytes = 0;
  return (backward ? sdpa_->prepare_backward(decision.key, &workspace_bytes)
                   : sdpa_->prepare_forward(decision.key, &workspace_bytes))
      .empty();
}

bool CudaBackend::sdpa_chunk_forward(float* out, float* lse, const AttentionChunkParams& p, bool accumulate) {
  const SdpaDecision decision = plan_sdpa(p);
  if (!decision.tries_cudnn()) return false;
  // K and V words are cuDNN's operands as they are, where aligned as it wants them (16 bytes); else the
  // caller widens them and asks again.
  const bool kv_words = p.k_words != nullptr;
  auto aligned = [](const uint16_t* words) { return reinterpret_cast<uintptr_t>(words) % 16 == 0; };
  if (kv_words && !(aligned(p.k_words) && aligned(p.v_words))) return false;
  size_t workspace_bytes = 0;
  if (!sdpa_->prepare_forward(decision.key, &workspace_bytes).empty()) return false;
  const int64_t q_count = int64_t{p.B} * p.Cq * p.H * p.D, kv_count = int64_t{p.B} * p.Ck * p.Hkv * p.D;
  const int64_t stats_count = int64_t{p.B} * p.H * p.Cq;
  const size_t kv_packed_bytes = kv_words ? 0 : kv_count * sizeof(uint16_t);
  ScratchLayout layout;
  const size_t q_at = layout.add(q_count * sizeof(uint16_t)), k_at = layout.add(kv_packed_bytes),
               v_at = layout.add(kv_packed_bytes), o_at = layout.add(q_count * sizeof(uint16_t)),
               stats_at = layout.add(stats_count * sizeof(float)), workspace_at = layout.add(workspace_bytes);
  char* base = static_cast<char*>(grow(sdpa_scratch_, layout.bytes()));
  auto words = [base](size_t at) { return reinterpret_cast<uint16_t*>(base + at); };
  pack_bf16(words(q_at), p.q, q_count);
  if (!kv_words) {
    pack_bf16(words(k_at), p.k, kv_count);
    pack_bf16(words(v_at), p.v, kv_count);
  }
  const uint16_t* k = kv_words ? p.k_words : words(k_at);
  const uint16_t* v = kv_words ? p.v_words : words(v_at);
  float* block_lse = reinterpret_cast<float*>(base + stats_at);
  sdpa_->forward(decision.key, SdpaForwardArgs{words(q_at), k, v, words(o_at), block_lse}, base + workspace_at);
  merge_block_kernel<<<row_blocks(int64_t{p.B} * p.Cq * p.H), kRowWarps * 32, 0, stream_>>>(
      out, lse, words(o_at), block_lse, p.B, p.Cq, p.H, p.D, accumulate);
  FPDT_CUDA_CHECK_LAUNCH();
  return true;
}

bool CudaBackend::sdpa_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                      const float* delta, const AttentionChunkParams& p) {
  const SdpaDecision decision = plan_sdpa(p);
  if (!decision.tries_cudnn()) return false;
  size_t workspace_bytes = 0;
  if (!sdpa_->prepare_backward(decision.key, &workspace_bytes).empty()) return false;
  const int64_t q_count = int64_t{p.B} * p.Cq * p.H * p.D, kv_count = int64_t{p.B} * p.Ck * p.Hkv * p.D;
  ScratchLayout layout;
  const size_t q_at = layout.add(q_count * sizeof(uint16_t)), k_at = layout.add(kv_count * sizeof(uint16_t)),
               v_at = layout.add(kv_count * sizeof(uint16_t)), o_at = layout.add(q_count * sizeof(uint16_t)),
               do_at = layout.add(q_count * sizeof(uint16_t)), dq_at = layout.add(q_count * sizeof(uint16_t)),
               dk_at = layout.add(kv_count * sizeof(uint16_t)), dv_at = layout.add(kv_count * sizeof(uint16_t)),
               workspace_at = layout.add(workspace_bytes);
  char* base = static_cast<char*>(grow(sdpa_scratch_, layout.bytes()));
  auto words = [base](size_t at) { return reinterpret_cast<uint16_t*>(base + at); };
  pack_bf16(words(q_at), p.q, q_count);
  pack_bf16(words(k_at), p.k, kv_count);
  pack_bf16(words(v_at), p.v, kv_count);
  backward_rows_kernel<<<row_blocks(int64_t{p.B} * p.Cq * p.H), kRowWarps * 32, 0, stream_>>>(
      words(do_at), words(o_at), dout, delta, p.B, p.Cq, p.H, p.D);
  FPDT_CUDA_CHECK_LAUNCH();
  sdpa_->backward(decision.key,
                  SdpaBackwardArgs{words(q_at), words(k_at), words(v_at), words(o_at), words(do_at), lse, words(dq_at),
                                   words(dk_at), words(dv_at)},
                  base + workspace_at);
  add_widened_kernel<<<blocks_for(q_count), kThreads, 0, stream_>>>(dq, words(dq_at), q_count);
  FPDT_CUDA_CHECK_LAUNCH();
  add_widened_kernel<<<blocks_for(kv_count), kThreads, 0, stream_>>>(dk, words(dk_at), kv_count);
  FPDT_CUDA_CHECK_LAUNCH();
  add_widened_kernel<<<blocks_for(kv_count), kThreads, 0, stream_>>>(dv, words(dv_at), kv_count);
  FPDT_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace fpdt::kernels::cuda

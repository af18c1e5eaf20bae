// The CPU flash attention's entry points (API and masking rule: cpu_backend.h; the design:
// flash_attention.h): the check at the edge, the empty block, the full-sequence ops as one block, and
// Δ for the backward; the kernels themselves are flash_attention_forward.cpp and _backward.cpp.
#include <algorithm>
#include <cmath>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/flash_attention.h"
#include "fpdt/kernels/cpu/gemm.h"

namespace fpdt::kernels::cpu {

namespace {

std::string shape_text(const AttentionChunkParams& p) {
  return "B=" + std::to_string(p.B) + " Cq=" + std::to_string(p.Cq) + " Ck=" + std::to_string(p.Ck) +
         " H=" + std::to_string(p.H) + " Hkv=" + std::to_string(p.Hkv) + " D=" + std::to_string(p.D);
}

}  // namespace

void CpuBackend::validate(const AttentionChunkParams& p) {
  const std::string shape = " (" + shape_text(p) + ")";
  FPDT_CHECK(p.B >= 0 && p.Cq >= 0 && p.Ck >= 0, "attention", "negative batch or token count" + shape,
             "check the chunk plan");
  FPDT_CHECK(p.H > 0 && p.Hkv > 0 && p.H % p.Hkv == 0, "attention",
             "q heads must be a positive multiple of kv heads" + shape, "check num_key_value_heads");
  FPDT_CHECK(p.D >= kMinHeadDim && p.D <= kMaxHeadDim, "attention",
             "head dim " + std::to_string(p.D) + " is outside the supported " + std::to_string(kMinHeadDim) + ".." +
                 std::to_string(kMaxHeadDim),
             "use a head dim of at most " + std::to_string(kMaxHeadDim));
  // (the packing gathers a panel's rows by 32-bit offsets, up to (kPanel − 1)·H·D floats)
  FPDT_CHECK(static_cast<int64_t>(p.H) * p.D < (int64_t{1} << 25), "attention",
             "q heads × head dim of 2^25 or more" + shape, "use fewer q heads per rank");
  FPDT_CHECK(std::isfinite(p.scale), "attention", "softmax scale is not finite", "use 1/sqrt(head dim)");
  FPDT_CHECK(p.window >= 0, "attention", "negative sliding window " + std::to_string(p.window),
             "use 0 for no window, or the window in tokens");
  FPDT_CHECK((p.q_doc_ids == nullptr) == (p.kv_doc_ids == nullptr), "attention",
             "document ids given for only one side of the block", "pass both q_doc_ids and kv_doc_ids, or neither");
  const bool empty = p.B == 0 || p.Cq == 0;
  FPDT_CHECK((p.k_words == nullptr) == (p.v_words == nullptr) && (p.k_words == nullptr || p.k == nullptr),
             "attention", "K and V as bf16 words: both words, and neither k nor v" + shape, "");
  const bool has_kv = (p.k != nullptr && p.v != nullptr) || p.k_words != nullptr;
  FPDT_CHECK(empty || (p.q != nullptr && (p.Ck == 0 || has_kv)), "attention", "null q, k or v" + shape, "");
  FPDT_CHECK(p.Cq < (int64_t{1} << 31) && p.Ck < (int64_t{1} << 31), "attention",
             "a block of 2^31 tokens or more" + shape, "use smaller chunks");
}

int64_t CpuBackend::set_pack_budget_floats(int64_t floats) {
  return flash::pack_budget_floats.exchange(std::max<int64_t>(floats, 0));
}

bool CpuBackend::set_bf16_dot_products(bool allowed) { return flash::bf16_dot_products_allowed.exchange(allowed); }

bool CpuBackend::set_amx_tiles(bool allowed) { return flash::amx_tiles_allowed.exchange(allowed); }

CpuBackend::Bf16Attention CpuBackend::bf16_attention() {
  AttentionChunkParams bf16;
  bf16.precision = Precision::bf16;
  if (flash::use_amx_tiles(bf16)) return Bf16Attention::amx_tiles;
  if (flash::use_bf16_dot_products(bf16)) return Bf16Attention::dot_products;
  return Bf16Attention::fp32_products;
}

std::string CpuBackend::bf16_attention_arithmetic() {
  switch (bf16_attention()) {
    case Bf16Attention::amx_tiles: return "AMX-BF16 tiles";
    case Bf16Attention::dot_products: return "AVX512-BF16 dot products";
    case Bf16Attention::fp32_products: break;
  }
  if (!bf16_dot_products_available()) return "fp32 products on bf16 operands (no bf16 units: bf16 storage only)";
  return "fp32 products on bf16 operands (this CPU's bf16 dot products are not faster)";
}

void CpuBackend::attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& p, bool accumulate) {
  validate(p);
  if (p.B == 0 || p.Cq == 0) return;
  FPDT_CHECK(out != nullptr && lse != nullptr, "attention", "null out or lse", "");
  if (!block_has_visible_pair(p.q_begin, p.Cq, p.kv_begin, p.Ck, p.window)) {  // the empty softmax: a no-op merge, or out = 0, lse = −inf
    if (!accumulate) {
      std::fill(out, out + static_cast<size_t>(p.B) * p.Cq * p.H * p.D, 0.0f);
      std::fill(lse, lse + static_cast<size_t>(p.B) * p.H * p.Cq, -flash::kInf);
    }
    return;
  }
  if (p.Cq == 1) {  // decoding: each kv row read once, in place (as floats or bf16 words)
    flash::forward_single_query(out, lse, p, accumulate);
    return;
  }
  if (p.k_words == nullptr) {
    flash::forward_block(out, lse, p, accumulate);
    return;
  }
  // The tiled kernel packs floats: K and V widened first, into scratch of their own (the kernel's is live).
  thread_local flash::Workspace widened_workspace;
  const int64_t n = kv_values(p);
  float* widened = widened_workspace.floats(2 * static_cast<size_t>(n));
  bf16_to_floats(widened, p.k_words, n);
  bf16_to_floats(widened + n, p.v_words, n);
  flash::forward_block(out, lse, with_widened_kv(p, widened), accumulate);
}

void CpuBackend::attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H,
                                       int D) {
  const int64_t rows = static_cast<int64_t>(B) * Cq * H;
#pragma omp parallel for schedule(static) if (rows * D >= (int64_t{1} << 15))
  for (int64_t row = 0; row < rows; ++row) {  // row = (b·Cq + i)·H + h
    const float* dout_row = dout + row * D;
    const float* out_row = out + row * D;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)  // in vectors of doubles (one chain of dependent adds was latency-bound)
    for (int d = 0; d < D; ++d) sum += static_cast<double>(dout_row[d]) * out_row[d];
    const int64_t h = row % H, i = (row / H) % Cq, b = row / (H * Cq);
    delta[(b * H + h) * Cq + i] = static_cast<float>(sum);
  }
}

void CpuBackend::attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                          const float* delta, const AttentionChunkParams& p) {
  validate(p);
  FPDT_CHECK(p.k_words == nullptr, "attention", "K and V as bf16 words are for the forward only", "");
  if (p.B == 0 || !block_has_visible_pair(p.q_begin, p.Cq, p.kv_begin, p.Ck, p.window)) return;
  FPDT_CHECK(dq && dk && dv && dout && lse && delta, "attention", "null gradient, dout, lse or delta", "");
  flash::backward_block(dq, dk, dv, dout, lse, delta, p);
}

void CpuBackend::attention_forward(float* out, float* lse, const AttentionParams& params) {
  attention_chunk_forward(out, lse, whole_sequence_block(params), /*accumulate=*/false);
}

void CpuBackend::attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                    const float* lse, const AttentionParams& params) {
  const AttentionChunkParams p = whole_sequence_block(params);
  validate(p);
  const int B = params.B, H = params.H, Hkv = params.Hkv, D = params.D;
  const int64_t S = params.S;
  const size_t q_elements = static_cast<size_t>(B) * S * H * D;
  const size_t kv_elements = static_cast<size_t>(B) * S * Hkv * D;
  std::fill(dq, dq + q_elements, 0.0f);
  std::fill(dk, dk + kv_elements, 0.0f);
  std::fill(dv, dv + kv_elements, 0.0f);
  thread_local flash::Workspace delta_workspace;  // separate from the kernels' scratch, which is live below
  float* delta = delta_workspace.floats(static_cast<size_t>(B) * H * S);  // (B, H, S)
  attention_chunk_delta(delta, dout, out, B, S, H, D);
  attention_chunk_backward(dq, dk, dv, dout, lse, delta, p);
}

}  // namespace fpdt::kernels::cpu
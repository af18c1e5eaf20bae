// The host-side decisions of the CUDA backend's cuBLASLt GEMM (linear.cu), kept free of CUDA types so
// the CPU tests check them: what a call does for its sizes (cuBLASLt refuses k = 0, so that case never
// reaches it, not even its heuristic), how aligned each operand is (the heuristic is told the real
// alignment: parameter tensors are 64-byte aligned, not the 256 B cuBLASLt assumes by default), where a
// bf16 GEMM's operand copies lie in their scratch, and the key under which a call's descriptors and
// algorithm are cached.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "fpdt/base/error.h"

namespace fpdt::kernels::cuda {

// C (m, n) = alpha · op(A) (m, k) · op(B) (k, n) + beta · C.
enum class GemmAction {
  nothing,  // an empty C, or k = 0 with beta = 1 (C = C)
  zero_c,   // k = 0 with beta = 0 (C = 0)
  matmul,   // cuBLASLt
};

inline GemmAction gemm_action(int64_t m, int64_t n, int64_t k, float beta) {
  FPDT_CHECK(m >= 0 && n >= 0 && k >= 0, "kernels", "a GEMM with a negative size", "");
  if (m == 0 || n == 0) return GemmAction::nothing;
  if (k > 0) return GemmAction::matmul;
  FPDT_CHECK(beta == 0.0f || beta == 1.0f, "kernels", "a GEMM over k = 0 supports beta 0 or 1 only", "");
  return beta == 0.0f ? GemmAction::zero_c : GemmAction::nothing;
}

// The largest power of two, at most 256 (cuBLASLt's largest alignment preference), that divides the
// address; 256 for null (an operand a call never reads).
constexpr uint32_t kMaxGemmAlignmentBytes = 256;
inline uint32_t alignment_bytes(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  if (address == 0) return kMaxGemmAlignmentBytes;
  const uintptr_t lowest_bit = address & (~address + 1);
  return lowest_bit < kMaxGemmAlignmentBytes ? static_cast<uint32_t>(lowest_bit) : kMaxGemmAlignmentBytes;
}

// The element type of a GEMM's A and B; C is fp32 in both. bf16 (Precision::bf16): A and B are copies of
// the fp32 operands rounded to nearest bf16, the products accumulate in fp32 (CUBLAS_COMPUTE_32F).
enum class GemmInputs : uint8_t { fp32, bf16 };

// The bytes a bf16 copy of `elements` values takes in the operand scratch: its 2 bytes per value rounded
// up to kMaxGemmAlignmentBytes, so the copy after it starts as aligned as cuBLASLt can use.
inline size_t bf16_copy_bytes(int64_t elements) {
  FPDT_CHECK(elements >= 0, "kernels", "a GEMM operand with a negative size", "");
  const size_t bytes = static_cast<size_t>(elements) * 2;
  return (bytes + kMaxGemmAlignmentBytes - 1) / kMaxGemmAlignmentBytes * kMaxGemmAlignmentBytes;
}

// Everything cuBLASLt's descriptors and heuristic depend on (the operands' type, the operation's
// transposes, sizes and leading dimensions, and the operands' alignments); alpha, beta and the pointers themselves are
// per-call arguments.
struct GemmKey {
  GemmInputs inputs = GemmInputs::fp32;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  bool operator==(const GemmKey& o) const {  // (linear.cu is C++17: no defaulted comparison)
    return inputs == o.inputs && trans_a == o.trans_a && trans_b == o.trans_b && m == o.m && n == o.n && k == o.k &&
           lda == o.lda && ldb == o.ldb && ldc == o.ldc && align_a == o.align_a && align_b == o.align_b && align_c == o.align_c;
  }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& key) const {
    size_t hash = std::hash<int64_t>{}(key.m);
    auto mix = [&hash](uint64_t value) {
      hash ^= std::hash<uint64_t>{}(value) + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
    };
    for (int64_t value : {key.n, key.k, key.lda, key.ldb, key.ldc}) mix(static_cast<uint64_t>(value));
    mix((uint64_t{key.align_a} << 40) | (uint64_t{key.align_b} << 20) | key.align_c);
    mix((key.inputs == GemmInputs::bf16 ? 4u : 0u) | (key.trans_a ? 2u : 0u) | (key.trans_b ? 1u : 0u));
    return hash;
  }
};

}  // namespace fpdt::kernels::cuda

// The `cpu` Backend: fast fp32 kernels (GEMMs on OpenBLAS or oneDNN: gemm.h; AVX2/FMA, OpenMP across
// rows; linear also in bf16 on oneDNN's bf16 kernels), each with
// exactly the semantics of its reference twin (reference/<family>.h); tests hold every one against
// the reference on fresh random inputs. Each op is defined in its family's file (cpu/norm.cpp
// defines rmsnorm_forward).
//
// Attention (flash_attention*.cpp; the design: flash_attention.h) is FlashAttention-2-style: exact
// (q block, kv block) kernels that FPDT feeds one chunk pair at a time and merges by log-sum-exp,
// and the full-sequence attention as one block. It never materialises a (Cq, Ck) matrix: scratch is
// a few tiles of 96–192 tokens per thread plus a capped packed copy of K/V, or of Q/dO with dQ's sums
// (set_pack_budget_floats) — nothing grows with Cq·Ck. fp32 storage; fp32 compute, or bf16 by the
// reference's spec (fp32 products on bf16-rounded operands; AVX512-BF16 dot products on request);
// softmax and LSE in fp32.
// Masking (one rule for every block, ops.h): key j of the kv block is visible from query i iff
// position_visible(q_begin + i, kv_begin + j, window) and, with document ids, q_doc_ids[b, i] ==
// kv_doc_ids[b, j]. A block wholly above the causal diagonal or before the window is skipped
// outright, and inside a block so are the tiles outside the mask; a block (or row) with no visible
// key gives the empty softmax (out 0, lse −inf), or with accumulate leaves out and lse untouched,
// bit for bit. The backward is deterministic: the result does not depend on the thread count or
// timing (dq sums its kv tiles in order).
#pragma once

#include <cstdint>
#include <string>

#include "fpdt/kernels/backend.h"

namespace fpdt::kernels::cpu {

class CpuBackend final : public Backend {
 public:
  // Holds OpenBLAS at one thread for the whole process: every GEMM runs on the OpenMP team instead
  // (cpu/gemm.h), one thread pool for every kernel; and sets that team (the calling thread's) to flush
  // subnormal floats to zero (FTZ, DAZ: linear.cpp), for the rest of the threads' lives.
  CpuBackend();
  std::string name() const override { return "cpu"; }
  DeviceMemory& memory() override { return host_memory(); }

#include "fpdt/kernels/backend_ops.inc"  // every op, as an override

  // What only the cpu attention has: its head-dim range (nothing in the kernels depends on D's size
  // or alignment; the upper bound caps the per-thread scratch, tuned and benchmarked for 32–256)...
  static constexpr int kMinHeadDim = 1;
  static constexpr int kMaxHeadDim = 256;
  // ...the check at its edge: throws fpdt::Error ("[attention] …; hint: …") unless the shapes,
  // pointers, scale and window are usable; every attention op calls it once and trusts it after...
  static void validate(const AttentionChunkParams& params);
  // ...and the cap on each call's packed copy, in floats (default 8 Mi = 32 MiB, but at least one
  // (b, kv head) group: 2·Ck·D floats forward, about 3·Cq·D·H/Hkv backward). Returns the previous
  // cap. Results do not depend on it (tests lower it to run many batches).
  static int64_t set_pack_budget_floats(int64_t floats);
  // Lets bf16 attention use AVX512-BF16's dot products where the CPU has them and AMX tiles are not in use,
  // or not (then the fp32 products on the same rounded operands); by default on where they run at twice the
  // FMAs' rate (AMD's), off where at the same (Intel's: flash_attention.h says why); returns the previous setting.
  static bool set_bf16_dot_products(bool allowed);
  // Lets bf16 attention use AMX-BF16 tiles where the CPU has them and Linux grants the tile state, or not
  // (then the dot products or the fp32 products, as set above); on by default; returns the previous setting.
  static bool set_amx_tiles(bool allowed);
  // Which arithmetic bf16 attention runs on here, as the settings above and this CPU leave it...
  enum class Bf16Attention { amx_tiles, dot_products, fp32_products };
  static Bf16Attention bf16_attention();
  // ...and in words for the config table ("AMX-BF16 tiles", "AVX512-BF16 dot products", or the fp32
  // products and why).
  static std::string bf16_attention_arithmetic();
};

}  // namespace fpdt::kernels::cpu

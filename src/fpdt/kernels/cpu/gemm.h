// The cpu backend's GEMMs: C (M, N) = op(A) (M, K) · op(B) (K, N), or += with accumulate, row-major with
// leading dimensions (op(A) = A stored (M, K), or with trans_a Aᵀ of A stored (K, M); B likewise), every
// one on the OpenMP team, fp32 output and accumulation:
//   gemm_f32   fp32 operands, on OpenBLAS (team_sgemm) or oneDNN's f32 matmul — per shape family the one
//              that measured faster (the table in gemm.cpp; figures in bench/RESULTS.md);
//   gemm_bf16  bf16 operands, on the unit that multiplies them fastest here (bf16_gemm_rule): oneDNN's
//              bf16 matmul on their words where its kernels outrun the fp32 FMAs (AMX tiles; AVX512-BF16 dot
//              products on AMD's Zen 4 and 5, which issue them at the FMAs' rate), else gemm_f32 over their
//              values as floats (exact: every bf16 is a float; the same sums within fp32 reordering).
// linear.cpp is their caller; bf16_operand makes its operands in the thread's scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fpdt::kernels::cpu {

void gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, const float* a, int lda, const float* b, int ldb,
              bool accumulate, float* c, int ldc);

// Where gemm_bf16's products run. bf16_units: oneDNN's bf16 kernels; the rule takes them where they are AMX's,
// or AVX512-BF16's on a CPU that issues vdpbf16ps at the FMAs' rate. fp32_fmas everywhere else: Intel's
// AVX512-BF16 without AMX issues vdpbf16ps at half the FMAs' rate (oneDNN's bf16 kernels ran at 0.6× OpenBLAS's
// sgemm on Emerald Rapids), oneDNN emulates bf16 on AVX-512 without it (0.28×) and has no bf16 matmul on AVX2,
// and a build may lack oneDNN (bench/RESULTS.md, GEMM libraries v5). The rule is decided once per process
// from the CPU and the kernel oneDNN picks, so that two runs on one machine take the same path.
enum class Bf16Gemm { bf16_units, fp32_fmas };
Bf16Gemm bf16_gemm_rule();
// Whether oneDNN has a bf16 kernel here at all (the rule may still prefer the FMAs).
bool bf16_gemm_units_exist();
// The arithmetic in force: the rule's, unless set below.
Bf16Gemm bf16_gemm_arithmetic();
// Sets it for the process (tests and benchmarks run both): bf16_units only where bf16_gemm_units_exist(),
// else throws fpdt::Error. Returns the previous one. Not to be changed while a GEMM runs.
Bf16Gemm set_bf16_gemm_arithmetic(Bf16Gemm arithmetic);

// A bf16 product's operand as gemm_bf16 reads it under the current arithmetic: its bf16 words (bf16_units)
// or their values as floats (fp32_fmas) — but a weight's words stay words under both (the FMAs widen them
// block by block: gemm_bf16); exactly one is set.
struct Bf16Operand {
  const uint16_t* words = nullptr;
  const float* values = nullptr;
};
// `values` rounded to bf16 (float_to_bf16's rule), n of them, into the calling thread's scratch slot (0 to
// 3: grown when a larger call comes, never shrunk or freed, so steady-state calls allocate nothing), as
// words or as floats — or, as floats, `values` itself where every one is a bf16 value already. (Words, a
// weight's working copy, are an operand as they are: Bf16Operand{words, nullptr}.)
Bf16Operand bf16_operand(int slot, const float* values, int64_t n);

// a and b made by bf16_operand under one arithmetic: on the bf16 units both words; on the FMAs a as values
// and b as values or words, widened to floats a block of its stored rows at a time into the calling
// thread's scratch (at most set_widen_block_bytes of it), each block's product run before the next: C's
// columns by blocks (trans_b), or the sum over K by blocks added into C (else: fp32 reordering).
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, Bf16Operand a, int lda, Bf16Operand b, int ldb,
               bool accumulate, float* c, int ldc);
// The most bytes of floats gemm_bf16 widens at once (at least 1 row's): 8 MiB unless set (tests cut small
// products into several blocks). Returns the previous one. Not to be changed while a GEMM runs.
int64_t set_widen_block_bytes(int64_t bytes);

// The same product on OpenBLAS alone, shared by the team: a single-threaded sgemm per thread on its own
// block of C (design in gemm.cpp). gemm_f32 runs it where OpenBLAS wins; benchmarks compare it.
void team_sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* a, int lda, const float* b, int ldb,
                bool accumulate, float* c, int ldc);

// Which library gemm_f32 runs for a product of that shape (the decision table).
enum class GemmLibrary { openblas, onednn };
GemmLibrary fp32_gemm_library(bool trans_a, bool trans_b, int M, int N, int K);

// On the team, for i < n: dst[i] = float_to_bf16(src[i]) (nearest, ties to even; dtype.h)...
void to_bf16(uint16_t* dst, const float* src, int64_t n);
// ...or its value, round_to_bf16(src[i]) (dst may be src)...
void round_to_bf16_values(float* dst, const float* src, int64_t n);
// ...and a bf16 word's value, exactly.
void bf16_to_floats(float* dst, const uint16_t* src, int64_t n);

// What gemm_bf16 runs on, for the config table: "brg:avx512_core_amx_bf16 (oneDNN)", or "fp32 FMAs (oneDNN's
// brg:avx512_core_bf16 slower)"...
std::string describe_bf16_gemms();
// ...and every library behind these, for benchmarks: "OpenBLAS SkylakeX; oneDNN 2.6.3; bf16 on …".
std::string describe_gemm_libraries();

}  // namespace fpdt::kernels::cpu

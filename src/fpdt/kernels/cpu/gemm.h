// The cpu backend's GEMMs: C (M, N) = op(A) (M, K) · op(B) (K, N), or += with accumulate, row-major with
// leading dimensions (op(A) = A stored (M, K), or with trans_a Aᵀ of A stored (K, M); B likewise), every
// one on the OpenMP team, fp32 output and accumulation:
//   gemm_f32   fp32 operands, on OpenBLAS (team_sgemm) or oneDNN's f32 matmul — per shape family the one
//              that measured faster (the table in gemm.cpp; figures in bench/RESULTS.md);
//   gemm_bf16  bf16 operands (to_bf16's bit patterns): oneDNN's bf16 matmul (AMX or AVX512-BF16 kernels);
//              in a build without oneDNN, team_sgemm over their fp32 values (exact: every bf16 is a float).
// linear.cpp is their caller; bf16_scratch holds its bf16 copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fpdt::kernels::cpu {

void gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, const float* a, int lda, const float* b, int ldb,
              bool accumulate, float* c, int ldc);
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* a, int lda, const uint16_t* b,
               int ldb, bool accumulate, float* c, int ldc);

// The same product on OpenBLAS alone, shared by the team: a single-threaded sgemm per thread on its own
// block of C (design in gemm.cpp). gemm_f32 runs it where OpenBLAS wins; benchmarks compare it.
void team_sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* a, int lda, const float* b, int ldb,
                bool accumulate, float* c, int ldc);

// Which library gemm_f32 runs for a product of that shape (the decision table).
enum class GemmLibrary { openblas, onednn };
GemmLibrary fp32_gemm_library(bool trans_a, bool trans_b, int M, int N, int K);

// dst[i] = float_to_bf16(src[i]) (nearest, ties to even; dtype.h) for i < n, on the team.
void to_bf16(uint16_t* dst, const float* src, int64_t n);

// The calling thread's scratch slot `slot` (0 to 3), at least `n` bf16 values: grown when a larger call
// comes, never shrunk or freed, so steady-state calls allocate nothing.
uint16_t* bf16_scratch(int slot, size_t n);

// The libraries behind these, for the config table and benchmarks: "OpenBLAS SkylakeX; oneDNN 2.6.3
// (bf16 brg:avx512_core_amx_bf16)" or "OpenBLAS SkylakeX (no oneDNN: bf16 as sgemm over rounded copies)".
std::string describe_gemm_libraries();

}  // namespace fpdt::kernels::cpu

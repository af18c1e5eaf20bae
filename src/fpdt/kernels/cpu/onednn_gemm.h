// oneDNN's matmul as the cpu backend's GEMMs use it (cpu/gemm.h chooses when): C (M, N) = op(A) · op(B)
// (+ C), row-major with leading dimensions, fp32 output and accumulation, inputs fp32 or bf16. oneDNN
// picks its kernels by the CPU's instruction sets (AMX, AVX512-BF16, AVX-512, AVX2) and runs them on the
// OpenMP team (its runtime is GCC's OpenMP, the same team as every other kernel; inside a parallel
// region, on the calling thread alone). Built from onednn_gemm.cpp when CMake finds oneDNN, else from
// onednn_stub.cpp, whose available() is false and whose matmul refuses.
#pragma once

#include <cstdint>
#include <string>

namespace fpdt::kernels::cpu::onednn {

// Whether this build has oneDNN.
bool available();

// "oneDNN 2.6.3", or "" without it.
std::string version();

enum class Input { f32, bf16 };  // bf16: a and b hold bf16 bit patterns (uint16_t), as float_to_bf16 gives

// C (M, N) = op(A) (M, K) · op(B) (K, N), or += with accumulate. op(A) = A, stored (M, K) with row stride
// lda, or with trans_a Aᵀ of A stored (K, M); B likewise ((K, N) or, with trans_b, (N, K)). Each shape
// (and team size) makes its primitive once per thread and keeps it, with its scratchpad; a call after
// that allocates nothing. Deterministic for a given thread count.
void matmul(Input input, bool trans_a, bool trans_b, int M, int N, int K, const void* a, int lda, const void* b,
            int ldb, bool accumulate, float* c, int ldc);

// The name oneDNN gives the kernel it runs for that product ("brg:avx512_core_amx_bf16"), "" without it.
std::string implementation(Input input, bool trans_a, bool trans_b, int M, int N, int K);

}  // namespace fpdt::kernels::cpu::onednn

// The cpu backend's GEMM layer (gemm.h): OpenBLAS shared by the OpenMP team (team_sgemm), oneDNN's
// matmul where present, the fp32 decision table between them, and the bf16 conversion and scratch.
#include "fpdt/kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cpu/blas_core.h"
#include "fpdt/kernels/cpu/onednn_gemm.h"
#include "fpdt/kernels/cpu/panel_gemm_bf16.h"
#include "fpdt/kernels/cpu/simd.h"  // the AVX-512 intrinsics, with GCC 12's warnings about them quieted
#include "fpdt/tensor/dtype.h"

namespace fpdt::kernels::cpu {

namespace {

// team_sgemm: blocks of the output are whole multiples of the SkylakeX/Haswell sgemm micro-tile's 16
// rows; below kTeamMinFlops (~10 µs of one core) one thread runs the whole product.
constexpr int kBlockAlign = 16;
constexpr double kTeamMinFlops = 2.0e6;
constexpr int64_t kConvertBlock = int64_t{1} << 14;  // values per to_bf16 work item (64 KiB of floats)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// Each thread runs one single-threaded OpenBLAS sgemm on its part (the backend holds OpenBLAS at one
// thread: its own pool would spin against the team on the same cores, which measured 10× slower steps
// on a loaded machine). A thread packs whatever its part reads, so the cut avoids packing a long operand
// twice:
//   - K at least twice M and N (a weight gradient, K = tokens): K is cut; thread 0 sums its tokens
//     into C, the others into scratch, then C += the scratch blocks in thread order;
//   - else C is cut along its longer side: rows (each thread packs all of B) when M ≥ N, else columns.
// Deterministic for a given thread count. The K cut's scratch grows once per calling thread.
void team_sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* a, int lda, const float* b, int ldb,
                bool accumulate, float* c, int ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const float beta = accumulate ? 1.0f : 0.0f;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool by_k = K >= 2 * int64_t{std::max(M, N)};
  const bool by_rows = M >= N;
  const int64_t extent = by_k ? K : by_rows ? M : N;
  const double flops = 2.0 * M * N * static_cast<double>(K);
  const int parts = flops < kTeamMinFlops ? 1 : static_cast<int>(std::min<int64_t>(threads, ceil_div(extent, kBlockAlign)));
  if (parts <= 1) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t per_part = ceil_div(ceil_div(extent, kBlockAlign), parts) * kBlockAlign;
  const size_t block = static_cast<size_t>(M) * N;  // one scratch C (M, N), dense
  thread_local std::vector<float> scratch_storage;  // the K cut's partial sums of threads 1 .. parts − 1
  if (by_k && scratch_storage.size() < block * (parts - 1)) scratch_storage.resize(block * (parts - 1));
  float* scratch = scratch_storage.data();  // the calling thread's, shared with the team
#pragma omp parallel num_threads(parts)
  {
    const int part = omp_get_thread_num();
    const int64_t begin = part * per_part, end = std::min(extent, begin + per_part);
    const int size = static_cast<int>(std::max<int64_t>(end - begin, 0));
    if (by_k) {  // tokens [begin, end): columns of op(A), rows of op(B)
      float* target = part == 0 ? c : scratch + (part - 1) * block;
      if (size > 0 || part > 0)
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, size, 1.0f, a + (trans_a ? begin * lda : begin), lda,
                    b + (trans_b ? begin : begin * ldb), ldb, part == 0 ? beta : 0.0f, target, part == 0 ? ldc : N);
#pragma omp barrier
#pragma omp for schedule(static)
      for (int row = 0; row < M; ++row) {
        float* c_row = c + static_cast<int64_t>(row) * ldc;  // (N)
        for (int p = 1; p < parts; ++p) {
          const float* partial = scratch + (p - 1) * block + static_cast<size_t>(row) * N;
          for (int col = 0; col < N; ++col) c_row[col] += partial[col];
        }
      }
    } else if (size > 0 && by_rows) {  // rows [begin, end) of C and of op(A)
      cblas_sgemm(CblasRowMajor, ta, tb, size, N, K, 1.0f, a + (trans_a ? begin : begin * lda), lda, b, ldb, beta,
                  c + begin * ldc, ldc);
    } else if (size > 0) {  // columns [begin, end) of C and of op(B)
      cblas_sgemm(CblasRowMajor, ta, tb, M, size, K, 1.0f, a, lda, b + (trans_b ? begin * ldb : begin), ldb, beta,
                  c + begin, ldc);
    }
  }
}

// The fp32 decision table, from bench/bench_gemm on the linear layer's three products at the models'
// shapes, 2 threads, two runs (bench/RESULTS.md, "GEMM libraries", GFLOP/s per CPU second, oneDNN vs
// OpenBLAS): oneDNN where it won both runs by 10 % or more, OpenBLAS elsewhere (ties within the noise of
// a shared machine, and dx of 8192 × 1536 × 1536, where oneDNN ran half as fast: 130–136 vs 279).
GemmLibrary fp32_gemm_library(bool trans_a, bool trans_b, int M, int N, int K) {
  if (!onednn::available()) return GemmLibrary::openblas;
  // dw of a layer of at most 512 × 512 over many tokens (8192 × 512 × 512: 229–244 vs 187–198)
  if (trans_a && !trans_b && M <= 512 && N <= 512 && K >= 4 * std::max(M, N)) return GemmLibrary::onednn;
  // forward of a layer from ≥ 1536 inputs to ≤ 512 outputs (8192 × 512 × 1536: 275–285 vs 241–255)
  if (!trans_a && trans_b && N <= 512 && K >= 1536) return GemmLibrary::onednn;
  return GemmLibrary::openblas;
}

void gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, const float* a, int lda, const float* b, int ldb,
              bool accumulate, float* c, int ldc) {
  if (K > 0 && fp32_gemm_library(trans_a, trans_b, M, N, K) == GemmLibrary::onednn) {
    onednn::matmul(onednn::Input::f32, trans_a, trans_b, M, N, K, a, lda, b, ldb, accumulate, c, ldc);
  } else {
    team_sgemm(trans_a, trans_b, M, N, K, a, lda, b, ldb, accumulate, c, ldc);
  }
}

namespace {

// The kernel oneDNN runs for a bf16 product ("brg:avx512_core_amx_bf16"), or "" where it has none (a build
// without oneDNN; oneDNN 2.6.3 on an AVX2 CPU, or under ONEDNN_MAX_CPU_ISA=AVX2, has no bf16 matmul at all).
// Asked once per process (oneDNN's choice follows the CPU and ONEDNN_MAX_CPU_ISA, both fixed by then).
const std::string& onednn_bf16_kernel() {
  static const std::string kernel = [] {
    if (!onednn::available()) return std::string();
    try {
      return onednn::implementation(onednn::Input::bf16, false, true, 1024, 1024, 1024);
    } catch (const Error&) {
      return std::string();
    }
  }();
  return kernel;
}

// Whether oneDNN's bf16 kernels here outrun the fp32 FMAs: AMX tiles, or AVX512-BF16 dot products on a CPU
// that issues them at the FMAs' rate (twice the FLOPs: AMD's; panel_gemm_bf16.h). Decided once, from the
// CPU and the kernel oneDNN picks, so that two runs on one machine take the same path (and the same bits).
bool bf16_units_outrun_fmas() {
  static const bool outrun = [] {
    const std::string& kernel = onednn_bf16_kernel();
    if (kernel.find("amx") != std::string::npos) return true;
    return kernel.find("bf16") != std::string::npos && cpu_bf16_dot_products_double_rate();
  }();
  return outrun;
}

// set_bf16_gemm_arithmetic's choice, or −1: the rule's.
std::atomic<int> chosen_bf16_gemm{-1};

// gemm_bf16 on the FMAs widens a weight's words this many bytes of floats at a time (set_widen_block_bytes):
// every weight of the peer and demo models but the head in one block, and never a float copy of a whole
// matrix (the head's V·h floats: 64 MiB at V = 32000, h = 512; Llama-3-8B's, 2 GiB). A block of B's rows
// is read by each of the product's row panels; 8 MiB keeps K blocks (dx) at least as long as OpenBLAS's
// own (~384), so C is passed over no more often than the GEMM's own blocking passes over it.
std::atomic<int64_t> widen_block_bytes{int64_t{8} << 20};

// dst[i] = the value of bf16 word src[i], exactly (bf16 is fp32's upper half), on the calling thread.
void bf16_to_floats_serial(float* dst, const uint16_t* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t word = static_cast<uint32_t>(src[i]) << 16;
    __builtin_memcpy(&dst[i], &word, 4);
  }
}

// dst[i] = src[i] rounded to bf16 (float_to_bf16's rule) for i < n, on the team: as bf16 words (Out =
// uint16_t) or as their values in floats (Out = float). 16 lanes at a time where the build has AVX-512:
// the same bits, NaNs and subnormals included (AVX512-BF16's vcvtneps2bf16 would flush subnormals to zero).
template <typename Out>
void round_to_bf16_team(Out* dst, const float* src, int64_t n) {
  const int64_t blocks = ceil_div(n, kConvertBlock);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kConvertBlock, end = std::min(n, begin + kConvertBlock);
    int64_t i = begin;
#if defined(__AVX512F__)
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), infinity = _mm512_set1_epi32(0x7f800000);
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
    for (; i + 16 <= end; i += 16) {
      const __m512i word = _mm512_loadu_si512(src + i);
      const __m512i high = _mm512_srli_epi32(word, 16);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(word, magnitude), infinity);
      const __m512i rounding = _mm512_add_epi32(half, _mm512_and_si512(high, one));
      const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(word, rounding), 16);
      const __m512i bits = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, quiet));
      if constexpr (std::is_same_v<Out, float>) {
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(bits, 16));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bits));
      }
    }
#endif
    for (; i < end; ++i) {
      if constexpr (std::is_same_v<Out, float>) {
        dst[i] = round_to_bf16(src[i]);
      } else {
        dst[i] = float_to_bf16(src[i]);
      }
    }
  }
}

// The calling thread's scratch slot `slot` (0 to 3: bf16_operand's; kWidenSlot: gemm_bf16's), at least
// `bytes`: grown when a larger call comes, never shrunk or freed, so steady-state calls allocate nothing.
constexpr int kWidenSlot = 4;
void* scratch_bytes(int slot, size_t bytes) {
  thread_local std::array<std::vector<std::byte>, 5> slots;
  std::vector<std::byte>& storage = slots.at(static_cast<size_t>(slot));
  if (storage.size() < bytes) storage.resize(bytes);
  return storage.data();
}

// Whether round_to_bf16 leaves each of x[0, n) as it is: its low 16 bits are zero and, for a NaN, the quiet
// bit is set. A model's kept activations are (bf16 rounds them as it keeps them), so the FMAs' operands read
// them in place; a gradient is not, and fails within the first block, read on the calling thread.
// The flaws of each value are OR-ed together (its low bits; 1 for a signalling NaN), in AVX-512 where the
// build has it: over 45 MB on 2 threads 1.6–2.1 ms, against 2.4–3.1 for the OR reduction in plain C++ (an
// AVX2 build's) and 5.6–6.9 for a reduction of bools, which the compiler vectorized poorly.
bool block_holds_bf16_values(const float* x, int64_t n) {
  uint32_t flaws = 0;
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512i low_half = _mm512_set1_epi32(0xffff), magnitude = _mm512_set1_epi32(0x7fffffff);
  const __m512i infinity = _mm512_set1_epi32(0x7f800000), quiet = _mm512_set1_epi32(0x00400000);
  __m512i low_bits = _mm512_setzero_si512();
  __mmask16 signalling = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i word = _mm512_loadu_si512(x + i);
    low_bits = _mm512_ternarylogic_epi32(low_bits, word, low_half, 0xf8);  // low_bits | (word & low_half)
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(word, magnitude), infinity);
    signalling |= _mm512_mask_testn_epi32_mask(nan, word, quiet);
  }
  flaws = _mm512_reduce_or_epi32(low_bits) | signalling;
#endif
#pragma omp simd reduction(| : flaws)
  for (int64_t j = i; j < n; ++j) {
    uint32_t bits;
    __builtin_memcpy(&bits, &x[j], 4);
    const uint32_t signalling_nan = (bits & 0x7fffffffu) > 0x7f800000u && (bits & 0x00400000u) == 0 ? 1u : 0u;
    flaws |= (bits & 0xffffu) | signalling_nan;
  }
  return flaws == 0;
}
bool holds_bf16_values(const float* x, int64_t n) {
  if (!block_holds_bf16_values(x, std::min(n, kConvertBlock))) return false;
  const int64_t blocks = ceil_div(n, kConvertBlock);
  bool all = true;
#pragma omp parallel for schedule(static) reduction(&& : all) if (blocks > 2)
  for (int64_t block = 1; block < blocks; ++block) {
    const int64_t begin = block * kConvertBlock;
    all = all && block_holds_bf16_values(x + begin, std::min(kConvertBlock, n - begin));
  }
  return all;
}

float* float_scratch(int slot, size_t n) { return static_cast<float*>(scratch_bytes(slot, n * sizeof(float))); }
uint16_t* bf16_scratch(int slot, size_t n) { return static_cast<uint16_t*>(scratch_bytes(slot, n * sizeof(uint16_t))); }

}  // namespace

bool bf16_gemm_units_exist() { return !onednn_bf16_kernel().empty(); }

Bf16Gemm bf16_gemm_rule() { return bf16_units_outrun_fmas() ? Bf16Gemm::bf16_units : Bf16Gemm::fp32_fmas; }

Bf16Gemm bf16_gemm_arithmetic() {
  const int chosen = chosen_bf16_gemm.load();
  return chosen < 0 ? bf16_gemm_rule() : static_cast<Bf16Gemm>(chosen);
}

Bf16Gemm set_bf16_gemm_arithmetic(Bf16Gemm arithmetic) {
  FPDT_CHECK(arithmetic == Bf16Gemm::fp32_fmas || bf16_gemm_units_exist(), "kernels",
             "bf16 GEMMs on the bf16 units were asked for, but oneDNN has no bf16 kernel here",
             "ask only where bf16_gemm_units_exist()");
  const Bf16Gemm previous = bf16_gemm_arithmetic();
  chosen_bf16_gemm.store(static_cast<int>(arithmetic));
  return previous;
}

Bf16Operand bf16_operand(int slot, const float* values, int64_t n) {
  if (bf16_gemm_arithmetic() == Bf16Gemm::bf16_units) {
    uint16_t* words = bf16_scratch(slot, static_cast<size_t>(n));
    to_bf16(words, values, n);
    return {words, nullptr};
  }
  if (holds_bf16_values(values, n)) return {nullptr, values};  // rounding would change nothing
  float* rounded = float_scratch(slot, static_cast<size_t>(n));
  round_to_bf16_values(rounded, values, n);
  return {nullptr, rounded};
}

int64_t set_widen_block_bytes(int64_t bytes) { return widen_block_bytes.exchange(std::max<int64_t>(bytes, 1)); }

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, Bf16Operand a, int lda, Bf16Operand b, int ldb,
               bool accumulate, float* c, int ldc) {
  if (K == 0) {  // C = 0 (or kept): no operand is read
    team_sgemm(trans_a, trans_b, M, N, 0, nullptr, lda, nullptr, ldb, accumulate, c, ldc);
    return;
  }
  if (bf16_gemm_arithmetic() == Bf16Gemm::bf16_units) {
    FPDT_CHECK(a.words != nullptr && b.words != nullptr, "kernels",
               "gemm_bf16 on the bf16 units was given an operand as values",
               "make both with bf16_operand, in one setting");
    onednn::matmul(onednn::Input::bf16, trans_a, trans_b, M, N, K, a.words, lda, b.words, ldb, accumulate, c, ldc);
    return;
  }
  FPDT_CHECK(a.values != nullptr, "kernels", "gemm_bf16 on the fp32 FMAs was given a as words",
             "make it with bf16_operand in this setting (only b, a weight, may come as words)");
  if (b.values != nullptr) {
    gemm_f32(trans_a, trans_b, M, N, K, a.values, lda, b.values, ldb, accumulate, c, ldc);
    return;
  }
  // b's words, widened to floats a block of its stored rows at a time, each block's product run before the
  // next is widened: B stored (N, K) with trans_b, its rows a block of C's columns; else (K, N), its rows a
  // block of the sum over K, added to C after the first.
  const int row_words = trans_b ? K : N, rows = trans_b ? N : K;
  const int block_rows = static_cast<int>(std::clamp<int64_t>(
      widen_block_bytes.load() / (int64_t{row_words} * static_cast<int64_t>(sizeof(float))), 1, rows));
  float* widened = float_scratch(kWidenSlot, static_cast<size_t>(block_rows) * row_words);  // (block_rows, row_words)
  for (int r0 = 0; r0 < rows; r0 += block_rows) {
    const int count = std::min(block_rows, rows - r0);
#pragma omp parallel for schedule(static) if (int64_t{count} * row_words >= kConvertBlock)
    for (int r = 0; r < count; ++r)
      bf16_to_floats_serial(widened + static_cast<int64_t>(r) * row_words, b.words + static_cast<int64_t>(r0 + r) * ldb,
                            row_words);
    if (trans_b) {
      gemm_f32(trans_a, true, M, count, K, a.values, lda, widened, row_words, accumulate, c + r0, ldc);
    } else {
      // op(A)'s columns [r0, r0 + count)
      const float* a_block = a.values + (trans_a ? static_cast<int64_t>(r0) * lda : r0);
      gemm_f32(trans_a, false, M, N, count, a_block, lda, widened, row_words, accumulate || r0 > 0, c, ldc);
    }
  }
}

void to_bf16(uint16_t* dst, const float* src, int64_t n) { round_to_bf16_team(dst, src, n); }

void round_to_bf16_values(float* dst, const float* src, int64_t n) { round_to_bf16_team(dst, src, n); }

void bf16_to_floats(float* dst, const uint16_t* src, int64_t n) {
  const int64_t blocks = ceil_div(n, kConvertBlock);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kConvertBlock;
    bf16_to_floats_serial(dst + begin, src + begin, std::min(kConvertBlock, n - begin));
  }
}

std::string describe_bf16_gemms() {
  if (bf16_gemm_arithmetic() == Bf16Gemm::bf16_units) return onednn_bf16_kernel() + " (oneDNN)";
  const std::string& kernel = onednn_bf16_kernel();
  if (kernel.empty()) return "fp32 FMAs (no bf16 GEMM kernels here)";
  return "fp32 FMAs (oneDNN's " + kernel + " slower)";
}

std::string describe_gemm_libraries() {
  const std::string blas = "OpenBLAS " + loaded_blas_core();
  const std::string bf16 = "; bf16 on " + describe_bf16_gemms();
  if (!onednn::available()) return blas + " (no oneDNN)" + bf16;
  return blas + "; " + onednn::version() + bf16;
}

}  // namespace fpdt::kernels::cpu

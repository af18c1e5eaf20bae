// The bf16 panel products of the CPU attention, on AVX512-BF16's dot products: C (M × kPanel) op= A (M × K)
// · B (K × kPanel) as panel_gemm.h's, with A and B held as pairs of bf16 along K — one 32-bit word per
// pair, the even k in the low half — and vdpbf16ps adding both products of a pair into each fp32
// accumulator (exact products, fp32 sums: the spec's within fp32 reordering). Used when the CPU has
// AVX512-BF16 (bf16_dot_products_available); otherwise the bf16 attention runs the fp32 panel_gemm on
// the same rounded values. Compiled for AVX512-BF16 by a target pragma, called only after that check.
#pragma once

#include <cstdint>

#include "fpdt/kernels/cpu/panel_gemm.h"
#include "fpdt/tensor/dtype.h"

#if defined(__AVX512F__)
#define FPDT_BF16_DOT_PRODUCTS 1
#else
#define FPDT_BF16_DOT_PRODUCTS 0
#endif

namespace fpdt::kernels::cpu {

// Whether this build has the bf16 dot-product kernels (it targets AVX-512) and this CPU runs them.
inline bool bf16_dot_products_available() {
#if FPDT_BF16_DOT_PRODUCTS
  static const bool available = [] {
    __builtin_cpu_init();  // may run from a static initialiser, before the runtime's own
    return __builtin_cpu_supports("avx512bf16");
  }();
  return available;
#else
  return false;
#endif
}

// Whether this CPU's bf16 dot products run at twice its fp32 FMAs' FLOP rate, whatever this build has (the
// bf16 GEMMs' rule, gemm.h): AMD's (Zen 4 and 5 issue vdpbf16ps zmm at vfmadd zmm's rate — measured 464
// against 232 GFLOP/s on two Zen 4 threads, bench/RESULTS.md), not Intel's (Cooper Lake to Emerald Rapids
// issue it at half that rate: the same FLOP rate as the FMAs, measured 421 against 420 on a
// Sapphire-Rapids-class thread). A rule of the vendor, not a timing, so that two runs on one machine pick
// the same path (and the same bits).
inline bool cpu_bf16_dot_products_double_rate() {
  static const bool double_rate = [] {
    __builtin_cpu_init();  // may run from a static initialiser, before the runtime's own
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_is("amd");
  }();
  return double_rate;
}
// ...and this build has the attention's dot-product kernels to use them.
inline bool bf16_dot_products_double_rate() {
  return cpu_bf16_dot_products_double_rate() && bf16_dot_products_available();
}

// The word of a bf16 pair from two floats that hold bf16 values (round_to_bf16): their upper halves are
// the bf16 bits, the even one goes low.
inline uint32_t bf16_pair_word(const float* even, const float* odd) {
  uint32_t low, high;
  __builtin_memcpy(&low, even, 4);
  __builtin_memcpy(&high, odd, 4);
  return (low >> 16) | (high & 0xffff0000u);
}

// Pairs of rows of a panel: dst[k2·kPanel + c] = the pair (rows[2·k2][c], rows[2·k2 + 1][c]) for
// k2 < ⌈K / 2⌉, from K rows of kPanel floats that hold bf16 values; row K (odd K) reads as zero.
inline void pair_panel_rows(uint32_t* dst, const float* rows, int K) {
  const float zero[kPanel] = {};
  for (int k2 = 0; k2 < (K + 1) / 2; ++k2) {
    const float* even = rows + (2 * k2) * kPanel;
    const float* odd = 2 * k2 + 1 < K ? rows + (2 * k2 + 1) * kPanel : zero;
#if defined(__AVX512BW__)
    for (int half = 0; half < 2; ++half) {  // the upper 16 bits of each odd lane over the even lane's, shifted
      const __m512i low = _mm512_srli_epi32(_mm512_loadu_si512(even + 16 * half), 16);
      const __m512i high = _mm512_loadu_si512(odd + 16 * half);
      _mm512_storeu_si512(dst + k2 * kPanel + 16 * half, _mm512_mask_blend_epi16(0xAAAAAAAAu, low, high));
    }
#else
    for (int c = 0; c < kPanel; ++c) dst[k2 * kPanel + c] = bf16_pair_word(even + c, odd + c);
#endif
  }
}

// Whether the calling thread flushes subnormal results of arithmetic to zero (MXCSR's FTZ, which CpuBackend
// sets for its OpenMP team, linear.cpp): then no value it computes is subnormal — P̃, P and dS among them.
inline bool flushes_subnormal_results() { return (_mm_getcsr() & _MM_FLUSH_ZERO_ON) != 0; }

// A panel row of kPanel floats (two vectors, lo the first kLanes) rounded to bf16 (round_to_bf16's rule,
// dtype.h): its kPanel words in order — what the attention's softmax hands its products (P, dS).
// computed_under_ftz: the values are results of arithmetic on a thread that flushes_subnormal_results
// (or zeros), so none is subnormal and the check below is left out (4 of the ~22 operations per 16 scores
// of the backward's softmax); values loaded as they came (the packings' q, k, v, dO) keep it.
#if defined(__AVX512BW__)
struct Bf16Row {
  __m512i words;  // 32 16-bit lanes
};
inline Bf16Row round_row(Vec lo, Vec hi, bool computed_under_ftz = false) {
  static_assert(kLanes == 16, "AVX-512 vectors");
#if defined(__AVX512BF16__)
  // One vcvtne2ps2bf16: round_to_bf16's bits (nearest even, NaNs made quiet), but that it reads a
  // subnormal as zero, so a row that holds one (P̃ or dS below 2^-126 where subnormals are kept: rare) is
  // rounded lane by lane.
  constexpr int kSubnormal = 0x20;  // vfpclassps category
  if (computed_under_ftz ||
      (_mm512_fpclass_ps_mask(lo, kSubnormal) | _mm512_fpclass_ps_mask(hi, kSubnormal)) == 0)
    return {reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo))};
#endif
  alignas(64) static constexpr uint16_t kUpperHalves[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                            23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                            45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return {_mm512_permutex2var_epi16(_mm512_castps_si512(vround_bf16(lo)), _mm512_load_si512(kUpperHalves),
                                    _mm512_castps_si512(vround_bf16(hi)))};
}
#else
struct Bf16Row {
  uint16_t words[kPanel];
};
inline Bf16Row round_row(Vec lo, Vec hi, bool /*computed_under_ftz: no check to leave out*/ = false) {
  alignas(64) float x[kPanel];
  vstore(x, lo);
  vstore(x + kLanes, hi);
  Bf16Row row;
  for (int c = 0; c < kPanel; ++c) row.words[c] = float_to_bf16(x[c]);
  return row;
}
#endif

// The row's kPanel words in order...
inline void store_words(uint16_t* dst, const Bf16Row& row) {
#if defined(__AVX512BW__)
  _mm512_storeu_si512(dst, row.words);
#else
  __builtin_memcpy(dst, row.words, sizeof(row.words));
#endif
}
// ...which, as 32-bit words, are the row paired along itself: dst[m] = the pair (row[2m], row[2m + 1]).
inline void store_pairs_along(uint32_t* dst, const Bf16Row& row) { store_words(reinterpret_cast<uint16_t*>(dst), row); }

// Two rows paired with each other: dst[c] = the pair (even[c], odd[c]), kPanel words.
inline void store_pair_row(uint32_t* dst, const Bf16Row& even, const Bf16Row& odd) {
#if defined(__AVX512BW__)
  // 16-bit lanes of (even, odd) as one 64-lane table: even's c is lane c, odd's lane 32 + c
  alignas(64) static constexpr uint16_t kFirstHalf[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                          37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                          11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kSecondHalf[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                           53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                           27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  _mm512_storeu_si512(dst, _mm512_permutex2var_epi16(even.words, _mm512_load_si512(kFirstHalf), odd.words));
  _mm512_storeu_si512(dst + kPanel / 2,
                      _mm512_permutex2var_epi16(even.words, _mm512_load_si512(kSecondHalf), odd.words));
#else
  for (int c = 0; c < kPanel; ++c) dst[c] = even.words[c] | static_cast<uint32_t>(odd.words[c]) << 16;
#endif
}

// A row of n floats as bf16 (float_to_bf16, dtype.h): dst[i] = float_to_bf16(src[i]), whole panels by
// round_row.
inline void bf16_row(uint16_t* dst, const float* src, int n) {
  int i = 0;
  for (; i + kPanel <= n; i += kPanel) store_words(dst + i, round_row(vload<Vec>(src + i), vload<Vec>(src + i + kLanes)));
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

#if FPDT_BF16_DOT_PRODUCTS
#pragma GCC push_options
#pragma GCC target("avx512bf16,avx512bw,avx512vl")

// Register tile: C (R × kPanel) op= A (R × K) · B (K × kPanel), K2 = ⌈K / 2⌉ pairs; the pair k2 of A's row
// r is the word a[r·a_row + k2·a_pair], B's pair row k2 the kPanel words b[k2·kPanel ..].
#define FPDT_FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
template <int R, Store kStore>
inline void bf16_register_tile(int K2, const uint32_t* __restrict a, int64_t a_row, int64_t a_pair,
                               const uint32_t* __restrict b, float* __restrict c, const float* __restrict col_scale) {
  static_assert(R >= 1 && R <= 8 && kPanel == 32, "bf16 tiles: 1 to 8 rows of two 16-float vectors");
#define FPDT_DECLARE(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
  FPDT_FOR_ROWS(FPDT_DECLARE)
#undef FPDT_DECLARE
  if constexpr (kStore != Store::overwrite) {
    __m512 s0 = _mm512_set1_ps(1.0f), s1 = s0;
    if constexpr (kStore == Store::rescale) {
      s0 = _mm512_loadu_ps(col_scale);
      s1 = _mm512_loadu_ps(col_scale + 16);
    }
#define FPDT_LOAD(r)                                      \
  if constexpr (R > r) {                                  \
    c##r##0 = _mm512_loadu_ps(c + r * kPanel);            \
    c##r##1 = _mm512_loadu_ps(c + r * kPanel + 16);       \
    if constexpr (kStore == Store::rescale) {             \
      c##r##0 = _mm512_mul_ps(c##r##0, s0);               \
      c##r##1 = _mm512_mul_ps(c##r##1, s1);               \
    }                                                     \
  }
    FPDT_FOR_ROWS(FPDT_LOAD)
#undef FPDT_LOAD
  }
  for (int k2 = 0; k2 < K2; ++k2) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + k2 * kPanel);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + k2 * kPanel + 16);
#define FPDT_DOT(r)                                                                                  \
  if constexpr (R > r) {                                                                             \
    const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * a_row + k2 * a_pair])); \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, ar, b0);                                                     \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, ar, b1);                                                     \
  }
    FPDT_FOR_ROWS(FPDT_DOT)
#undef FPDT_DOT
  }
#define FPDT_STORE(r)                                  \
  if constexpr (R > r) {                               \
    _mm512_storeu_ps(c + r * kPanel, c##r##0);      \
    _mm512_storeu_ps(c + r * kPanel + 16, c##r##1); \
  }
  FPDT_FOR_ROWS(FPDT_STORE)
#undef FPDT_STORE
}
#undef FPDT_FOR_ROWS

template <int R, Store kStore>
inline void bf16_register_tile_of(int rows, int K2, const uint32_t* a, int64_t a_row, int64_t a_pair, const uint32_t* b,
                                  float* c, const float* col_scale) {
  if constexpr (R > 1) {
    if (rows < R) return bf16_register_tile_of<R - 1, kStore>(rows, K2, a, a_row, a_pair, b, c, col_scale);
  }
  bf16_register_tile<R, kStore>(K2, a, a_row, a_pair, b, c, col_scale);
}

// Panel GEMM: C (M × kPanel) op= A (M × K) · B (K × kPanel) in bf16 pairs, M cut into groups of kRows
// rows, group g of A at a + g·a_group. A's layouts as panel_gemm's, in words: packed [k2][kRows] (a_row
// 1, a_pair kRows), rows (a_row = the row's words, a_pair 1).
template <Store kStore>
void bf16_panel_gemm(int M, int K, const uint32_t* a, int64_t a_row, int64_t a_pair, int64_t a_group,
                     const uint32_t* b, float* c, const float* col_scale = nullptr) {
  const int K2 = (K + 1) / 2;
  for (int m0 = 0, g = 0; m0 < M; m0 += kRows, ++g)
    bf16_register_tile_of<kRows, kStore>(std::min(kRows, M - m0), K2, a + g * a_group, a_row, a_pair, b,
                                         c + m0 * kPanel, col_scale);
}

#pragma GCC pop_options
#endif

}  // namespace fpdt::kernels::cpu

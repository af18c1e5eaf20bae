// The bf16 pairs the AVX512-BF16 attention products read (panel_gemm_bf16.h: one 32-bit word per two
// bf16 along a product's inner dimension, the even one low): the packings of K, V (forward) and Q, dO
// (backward) once per call (the tiles a task pairs itself: panel_gemm_bf16.h). Each layout is the
// fp32 path's (flash_attention_forward.cpp, _backward.cpp) with the inner dimension halved into words;
// the halves past the data are 0 (a pair's other half, and a zero times a finite value, adds nothing).
// The AMX tiles (panel_gemm_amx.h) read their A operands by rows of words instead: pack_kv_amx and
// pack_q_tile_amx, their rows padded to whole tiles and K steps with zeros.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/flash_attention.h"
#include "fpdt/tensor/dtype.h"

namespace fpdt::kernels::cpu::flash {

// Two rows of D floats (odd null: zeros) rounded to bf16 (float_to_bf16's bits) and paired with each
// other d by d into groups of kRows words: dst[(d / kRows)·group_words + d % kRows] = the pair
// (even[d], odd[d]); with even_along (and odd_along), each row's own pairs along D too:
// even_along[d / 2] = the pair (even[d], even[d + 1]) (D odd: the last word's other half is not written).
// Whole panels of kPanel values in vectors (panel_gemm_bf16.h's rows), the rest value by value.
inline void pair_rows(uint32_t* dst, int64_t group_words, const float* even, const float* odd, int D,
                      uint32_t* even_along = nullptr, uint32_t* odd_along = nullptr) {
  int d = 0;
  if constexpr (kPanel % kRows == 0) {
    const Vec zero = vset<Vec>(0.0f);
    for (; d + kPanel <= D; d += kPanel) {
      const Bf16Row e = round_row(vload<Vec>(even + d), vload<Vec>(even + d + kLanes));
      const Bf16Row o = odd ? round_row(vload<Vec>(odd + d), vload<Vec>(odd + d + kLanes)) : round_row(zero, zero);
      if (even_along) store_pairs_along(even_along + d / 2, e);
      if (odd_along) store_pairs_along(odd_along + d / 2, o);
      alignas(64) uint32_t paired[kPanel];
      store_pair_row(paired, e, o);
      for (int g = 0; g < kPanel; g += kRows)
        std::copy(paired + g, paired + g + kRows, dst + ((d + g) / kRows) * group_words + (d + g) % kRows);
    }
  }
  auto* even_half = reinterpret_cast<uint16_t*>(even_along);
  auto* odd_half = reinterpret_cast<uint16_t*>(odd_along);
  for (; d < D; ++d) {
    const uint16_t e = float_to_bf16(even[d]), o = odd ? float_to_bf16(odd[d]) : uint16_t{0};
    dst[(d / kRows) * group_words + d % kRows] = e | static_cast<uint32_t>(o) << 16;
    if (even_half) even_half[d] = e;
    if (odd_half) odd_half[d] = o;
  }
}

// The K and V tile `tile` of one (b, kv head) group as bf16 pairs (forward_task's layouts), into the
// group's packed buffers: K [key group][D pair][kRows] words at word kv_lo·⌈D/2⌉, V [D group][key
// pair][kRows] words at word tile·row_groups(D)·⌈kFwdKeys/2⌉·kRows; the halves past D and past nk are 0.
inline void pack_kv_pairs(float* k_group, float* v_group, int64_t tile, int nk, const float* k_rows, const float* v_rows,
                int64_t row_stride, int D) {
  const int D2 = pairs(D), key_pairs = pairs(kFwdKeys);
  auto* k_words = reinterpret_cast<uint32_t*>(k_group) + tile * kFwdKeys * D2;
  auto* v_words = reinterpret_cast<uint32_t*>(v_group) + tile * row_groups(D) * key_pairs * kRows;
  std::fill(k_words, k_words + static_cast<size_t>(kFwdKeys) * D2, 0u);
  std::fill(v_words, v_words + static_cast<size_t>(row_groups(D)) * key_pairs * kRows, 0u);
  for (int j = 0; j < nk; j += 2)
    pair_rows(v_words + (j / 2) * kRows, int64_t{key_pairs} * kRows, v_rows + j * row_stride,
              j + 1 < nk ? v_rows + (j + 1) * row_stride : nullptr, D);
  uint32_t k_along[CpuBackend::kMaxHeadDim / 2 + 1] = {};  // one key's words along D (odd D: high half 0)
  for (int j = 0; j < nk; ++j) {
    bf16_row(reinterpret_cast<uint16_t*>(k_along), k_rows + j * row_stride, D);
    uint32_t* k_key = k_words + static_cast<size_t>(j / kRows) * D2 * kRows + j % kRows;
    for (int d2 = 0; d2 < D2; ++d2) k_key[d2 * kRows] = k_along[d2];
  }
}

// One q tile of Q or dO (mq rows of D floats, row_stride apart) as bf16 pairs, in the two layouts the
// backward's products read, into one tile slot of the packed copy (tile_floats floats, ≥ both):
//   by rows: [i][D pair] words at the slot's start — A of S = Q Kᵀ and dP = dO Vᵀ (pairs along D);
//   by columns: [D group][i pair][kRows] words at word tile_floats / 2 — A of dKᵀ = Qᵀ dS and
//   dVᵀ = dOᵀ P (pairs along the queries).
inline void pack_q_tile_pairs(float* slot, int64_t tile_floats, const float* rows, int64_t row_stride, int mq, int D) {
  const int D2 = pairs(D), query_pairs = pairs(kBwdQueries);
  auto* by_rows = reinterpret_cast<uint32_t*>(slot);
  uint32_t* by_columns = by_rows + tile_floats / 2;
  std::fill(by_rows, by_rows + static_cast<size_t>(kBwdQueries) * D2, 0u);
  std::fill(by_columns, by_columns + static_cast<size_t>(row_groups(D)) * query_pairs * kRows, 0u);
  for (int i = 0; i < mq; i += 2) {
    const bool odd = i + 1 < mq;
    pair_rows(by_columns + (i / 2) * kRows, int64_t{query_pairs} * kRows, rows + i * row_stride,
              odd ? rows + (i + 1) * row_stride : nullptr, D, by_rows + static_cast<size_t>(i) * D2,
              odd ? by_rows + static_cast<size_t>(i + 1) * D2 : nullptr);
  }
}

// One column of words of a transposed pair layout from two rows of D bf16 values: dst[d·row_words] = the
// pair (even[d], odd[d]) for d < D (odd null: zeros) — a token pair's words down the head-dim rows.
inline void scatter_pair_column(uint32_t* dst, int64_t row_words, const uint16_t* even, const uint16_t* odd, int D) {
  int d = 0;
#if defined(__AVX512F__)
  const __m512i index = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32(static_cast<int32_t>(row_words)));
  for (; d + 16 <= D; d += 16) {
    const __m512i low = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(even + d)));
    const __m512i high = odd ? _mm512_slli_epi32(
                                   _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd + d))), 16)
                             : _mm512_setzero_si512();
    _mm512_i32scatter_epi32(dst + d * row_words, index, _mm512_or_si512(low, high), 4);
  }
#endif
  for (; d < D; ++d) dst[d * row_words] = even[d] | (odd ? static_cast<uint32_t>(odd[d]) << 16 : 0u);
}

// The K and V tile `tile` of one (b, kv head) group in the AMX forward's layouts, into the group's packed
// buffers: K [key][amx_round(⌈D/2⌉) D pairs] words (A of Sᵀ = K Qᵀ) at word tile·kFwdKeys·amx_round(⌈D/2⌉),
// Vᵀ [amx_round(D) head dims][kAmxTokenWords key pairs] words (A of Oᵀ = Vᵀ Pᵀ) at word
// tile·amx_round(D)·kAmxTokenWords; every half past D or nk is 0.
inline void pack_kv_amx(float* k_group, float* v_group, int64_t tile, int nk, const float* k_rows, const float* v_rows,
                        int64_t row_stride, int D) {
  const int k_words = amx_round(pairs(D));
  const size_t k_halves = 2 * static_cast<size_t>(kFwdKeys) * k_words;
  const size_t v_halves = 2 * static_cast<size_t>(amx_round(D)) * kAmxTokenWords;
  auto* k_half = reinterpret_cast<uint16_t*>(k_group) + tile * k_halves;
  auto* v_half = reinterpret_cast<uint16_t*>(v_group) + tile * v_halves;
  std::fill(k_half, k_half + k_halves, uint16_t{0});
  std::fill(v_half, v_half + v_halves, uint16_t{0});
  for (int j = 0; j < nk; ++j) bf16_row(k_half + 2 * static_cast<size_t>(j) * k_words, k_rows + j * row_stride, D);
  uint16_t v_keys[2][CpuBackend::kMaxHeadDim];
  for (int j = 0; j < nk; j += 2) {
    bf16_row(v_keys[0], v_rows + j * row_stride, D);
    if (j + 1 < nk) bf16_row(v_keys[1], v_rows + (j + 1) * row_stride, D);
    scatter_pair_column(reinterpret_cast<uint32_t*>(v_half) + j / 2, kAmxTokenWords, v_keys[0],
                        j + 1 < nk ? v_keys[1] : nullptr, D);
  }
}
// Words of one tile of the AMX forward's packed K and V.
inline int64_t amx_k_tile_words(int D) { return static_cast<int64_t>(kFwdKeys) * amx_round(pairs(D)); }
inline int64_t amx_v_tile_words(int D) { return static_cast<int64_t>(amx_round(D)) * kAmxTokenWords; }

// One q tile of Q or dO (mq rows of D floats, row_stride apart) in the AMX backward's layouts, into one
// tile slot of the packed copy (amx_q_tile_words(D) words):
//   by rows: [i][amx_round(⌈D/2⌉) D pairs] words at the slot's start — A of S = Q Kᵀ and dP = dO Vᵀ;
//   by columns: [amx_round(D) head dims][kAmxTokenWords query pairs] words after them — A of dKᵀ = Qᵀ dS
//   and dVᵀ = dOᵀ P. Every half past D or mq is 0.
inline int64_t amx_q_rows_words(int D) { return static_cast<int64_t>(kBwdQueries) * amx_round(pairs(D)); }
inline int64_t amx_q_tile_words(int D) {
  return amx_q_rows_words(D) + static_cast<int64_t>(amx_round(D)) * kAmxTokenWords;
}
inline void pack_q_tile_amx(float* slot, const float* rows, int64_t row_stride, int mq, int D) {
  const int row_words = amx_round(pairs(D));
  auto* by_rows = reinterpret_cast<uint16_t*>(slot);
  uint16_t* by_columns = by_rows + 2 * amx_q_rows_words(D);
  std::fill(by_rows, by_rows + 2 * amx_q_tile_words(D), uint16_t{0});
  for (int i = 0; i < mq; ++i) bf16_row(by_rows + static_cast<size_t>(i) * 2 * row_words, rows + i * row_stride, D);
  for (int i = 0; i < mq; i += 2)
    scatter_pair_column(reinterpret_cast<uint32_t*>(by_columns) + i / 2, kAmxTokenWords,
                        by_rows + static_cast<size_t>(i) * 2 * row_words,
                        i + 1 < mq ? by_rows + static_cast<size_t>(i + 1) * 2 * row_words : nullptr, D);
}

}  // namespace fpdt::kernels::cpu::flash

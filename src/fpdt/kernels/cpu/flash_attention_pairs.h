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

// The K and V tile `tile` of one (b, kv head) group as bf16 pairs (forward_task's layouts), into the
// group's packed buffers: K [key group][D pair][kRows] words at word kv_lo·⌈D/2⌉, V [D group][key
// pair][kRows] words at word tile·row_groups(D)·⌈kFwdKeys/2⌉·kRows; the halves past D and past nk are 0.
inline void pack_kv_pairs(float* k_group, float* v_group, int64_t tile, int nk, const float* k_rows, const float* v_rows,
                int64_t row_stride, int D) {
  const int D2 = pairs(D), key_pairs = pairs(kFwdKeys);
  auto* k_half = reinterpret_cast<uint16_t*>(reinterpret_cast<uint32_t*>(k_group) + tile * kFwdKeys * D2);
  auto* v_half = reinterpret_cast<uint16_t*>(reinterpret_cast<uint32_t*>(v_group) +
                                             tile * row_groups(D) * key_pairs * kRows);
  std::fill(k_half, k_half + 2 * static_cast<size_t>(kFwdKeys) * D2, uint16_t{0});
  std::fill(v_half, v_half + 2 * static_cast<size_t>(row_groups(D)) * key_pairs * kRows, uint16_t{0});
  for (int j = 0; j < nk; ++j) {
    const float* k_row = k_rows + j * row_stride;
    const float* v_row = v_rows + j * row_stride;
    uint16_t* k_key = k_half + 2 * (static_cast<size_t>(j / kRows) * D2 * kRows + j % kRows);
    for (int d = 0; d < D; ++d) {
      k_key[2 * (d / 2) * kRows + d % 2] = float_to_bf16(k_row[d]);
      v_half[2 * ((static_cast<size_t>(d / kRows) * key_pairs + j / 2) * kRows + d % kRows) + j % 2] =
          float_to_bf16(v_row[d]);
    }
  }
}

// One q tile of Q or dO (mq rows of D floats, row_stride apart) as bf16 pairs, in the two layouts the
// backward's products read, into one tile slot of the packed copy (tile_floats floats, ≥ both):
//   by rows: [i][D pair] words at the slot's start — A of S = Q Kᵀ and dP = dO Vᵀ (pairs along D);
//   by columns: [D group][i pair][kRows] words at word tile_floats / 2 — A of dKᵀ = Qᵀ dS and
//   dVᵀ = dOᵀ P (pairs along the queries).
inline void pack_q_tile_pairs(float* slot, int64_t tile_floats, const float* rows, int64_t row_stride, int mq, int D) {
  const int D2 = pairs(D), query_pairs = pairs(kBwdQueries);
  auto* by_rows = reinterpret_cast<uint16_t*>(slot);
  auto* by_columns = reinterpret_cast<uint16_t*>(reinterpret_cast<uint32_t*>(slot) + tile_floats / 2);
  std::fill(by_rows, by_rows + 2 * static_cast<size_t>(kBwdQueries) * D2, uint16_t{0});
  std::fill(by_columns, by_columns + 2 * static_cast<size_t>(row_groups(D)) * query_pairs * kRows, uint16_t{0});
  for (int i = 0; i < mq; ++i) {
    const float* row = rows + i * row_stride;
    for (int d = 0; d < D; ++d) {
      const uint16_t value = float_to_bf16(row[d]);
      by_rows[static_cast<size_t>(i) * 2 * D2 + d] = value;
      by_columns[2 * ((static_cast<size_t>(d / kRows) * query_pairs + i / 2) * kRows + d % kRows) + i % 2] = value;
    }
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

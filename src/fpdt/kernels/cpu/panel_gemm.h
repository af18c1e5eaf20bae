// The panel products of the CPU attention: C (M × P) = / += A (M × K) · B (K × P), the P = kPanel
// columns one contiguous panel of two vectors (32 floats on AVX-512, 16 on AVX2), A broadcast a row at
// a time by a kRows × kPanel register tile (8 × 32: 16 of the 32 zmm as accumulators; 6 × 16: 12 of
// the 16 ymm), and the gathers that move rows of tokens into panels and back. Both widths run the same
// arithmetic in the same order, so they give the same results. No BLAS: the operands are small tiles.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "fpdt/kernels/cpu/simd.h"
#include "fpdt/tensor/dtype.h"

namespace fpdt::kernels::cpu {

// A register tile has kRows rows of kPanel columns (two vectors): 2·kRows accumulators.
constexpr int kRows = kLanes == 16 ? 8 : 6;
constexpr int kPanel = 2 * kLanes;  // columns of a register tile and width of every panel: two vectors
inline int row_groups(int D) { return (D + kRows - 1) / kRows; }  // groups of kRows head dims
inline int panels(int D) { return (D + kPanel - 1) / kPanel; }    // panels of kPanel head dims

// Register tile: C (R × kPanel) op= A (R × K) · B (K × kPanel). C rows are kPanel floats apart (a
// panel) and B(k, :) = b[kPanel·k .. kPanel·(k + 1)). A is read in one of three layouts:
enum class Layout {
  rows,     // row-major:           A(r, k) = a[r·a_stride + k]
  packed,   // [k][kRows]:          A(r, k) = a[kRows·k + r]            (a_stride unused)
  grouped,  // [k / kRows][r][kRows]: A(r, k) = a[(k / kRows)·a_stride + kRows·r + k % kRows]
};
// `packed` and `grouped` are the same buffer seen two ways: a tile X (M × D) stored [D group][i][kRows]
// is packed for products whose rows are head dims (Xᵀ · …) and grouped for rows of tokens (X · …).
enum class Store { overwrite, accumulate, rescale };  // C = AB;  C += AB;  C = C ∘ col_scale + AB

// The 2·R accumulators are named variables (not arrays, which GCC keeps on the stack), one macro
// expansion per row; rows r >= R compile away.
#define FPDT_FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define FPDT_FMA(r)                               \
  if constexpr (R > r) {                          \
    const Vec ar = vbroadcast<Vec>(FPDT_A_AT(r)); \
    c##r##0 = vfma(ar, b0, c##r##0);              \
    c##r##1 = vfma(ar, b1, c##r##1);              \
  }
template <int R, Layout kA, Store kStore>
inline void register_tile(int K, const float* __restrict a, int64_t a_stride, const float* __restrict b,
                          float* __restrict c, const float* __restrict col_scale) {
  static_assert(R >= 1 && R <= kRows && kRows <= 8, "a register tile has 1 to kRows (at most 8) rows");
#define FPDT_DECLARE(r) Vec c##r##0 = vset<Vec>(0.0f), c##r##1 = vset<Vec>(0.0f);
  FPDT_FOR_ROWS(FPDT_DECLARE)
#undef FPDT_DECLARE
  if constexpr (kStore != Store::overwrite) {
    Vec s0 = vset<Vec>(1.0f), s1 = s0;
    if constexpr (kStore == Store::rescale) {
      s0 = vload<Vec>(col_scale);
      s1 = vload<Vec>(col_scale + kLanes);
    }
#define FPDT_LOAD(r)                               \
  if constexpr (R > r) {                           \
    c##r##0 = vload<Vec>(c + r * kPanel);          \
    c##r##1 = vload<Vec>(c + r * kPanel + kLanes); \
    if constexpr (kStore == Store::rescale) {      \
      c##r##0 = vmul(c##r##0, s0);                 \
      c##r##1 = vmul(c##r##1, s1);                 \
    }                                              \
  }
    FPDT_FOR_ROWS(FPDT_LOAD)
#undef FPDT_LOAD
  }
  if constexpr (kA == Layout::grouped) {
    for (int k0 = 0; k0 < K; k0 += kRows) {
      const float* ag = a + (k0 / kRows) * a_stride;
      const float* bg = b + kPanel * k0;
      if (K - k0 >= kRows) {
#pragma GCC unroll 8
        for (int kk = 0; kk < kRows; ++kk) {
          const Vec b0 = vload<Vec>(bg + kPanel * kk), b1 = vload<Vec>(bg + kPanel * kk + kLanes);
#define FPDT_A_AT(r) (ag + kRows * r + kk)
          FPDT_FOR_ROWS(FPDT_FMA)
#undef FPDT_A_AT
        }
      } else {
        for (int kk = 0; kk < K - k0; ++kk) {
          const Vec b0 = vload<Vec>(bg + kPanel * kk), b1 = vload<Vec>(bg + kPanel * kk + kLanes);
#define FPDT_A_AT(r) (ag + kRows * r + kk)
          FPDT_FOR_ROWS(FPDT_FMA)
#undef FPDT_A_AT
        }
      }
    }
  } else {
    for (int k = 0; k < K; ++k) {
      const Vec b0 = vload<Vec>(b + kPanel * k), b1 = vload<Vec>(b + kPanel * k + kLanes);
#define FPDT_A_AT(r) (kA == Layout::packed ? a + kRows * k + r : a + r * a_stride + k)
      FPDT_FOR_ROWS(FPDT_FMA)
#undef FPDT_A_AT
    }
  }
#define FPDT_STORE(r)                         \
  if constexpr (R > r) {                      \
    vstore(c + r * kPanel, c##r##0);          \
    vstore(c + r * kPanel + kLanes, c##r##1); \
  }
  FPDT_FOR_ROWS(FPDT_STORE)
#undef FPDT_STORE
}
#undef FPDT_FMA
#undef FPDT_FOR_ROWS

// The register tile of `rows` rows (1..R), chosen at run time among the compiled ones.
template <int R, Layout kA, Store kStore>
inline void register_tile_of(int rows, int K, const float* a, int64_t a_stride, const float* b, float* c,
                             const float* col_scale) {
  if constexpr (R > 1) {
    if (rows < R) return register_tile_of<R - 1, kA, kStore>(rows, K, a, a_stride, b, c, col_scale);
  }
  register_tile<R, kA, kStore>(K, a, a_stride, b, c, col_scale);
}

// Panel GEMM: C (M × kPanel) op= A (M × K) · B (K × kPanel), M cut into groups of kRows rows; group g
// of A starts at a + g·a_group_stride (rows: kRows·a_stride; packed: its [k][kRows] block; grouped:
// kRows·kRows).
template <Layout kA, Store kStore>
void panel_gemm(int M, int K, const float* a, int64_t a_stride, int64_t a_group_stride, const float* b, float* c,
                const float* col_scale = nullptr) {
  for (int m0 = 0, g = 0; m0 < M; m0 += kRows, ++g)
    register_tile_of<kRows, kA, kStore>(std::min(kRows, M - m0), K, a + g * a_group_stride, a_stride, b,
                                        c + m0 * kPanel, col_scale);
}

// Scatter one row of D floats into kRows-wide groups: dst[g·group_stride + r] = row[g·kRows + r],
// zero past D (the A operand of a product whose rows are head dims); with to_bf16, each rounded to
// bf16 (round_to_bf16, dtype.h).
inline void pack_row_by_groups(float* dst, int64_t group_stride, const float* row, int D, bool to_bf16 = false) {
  int g = 0;
  for (; (g + 1) * kRows <= D; ++g) {
    if (!to_bf16) {
      std::memcpy(dst + g * group_stride, row + g * kRows, kRows * sizeof(float));
      continue;
    }
    for (int r = 0; r < kRows; ++r) dst[g * group_stride + r] = round_to_bf16(row[g * kRows + r]);
  }
  if (g * kRows < D) {
    float* tail = dst + g * group_stride;
    for (int r = 0; r < kRows; ++r) {
      const float x = g * kRows + r < D ? row[g * kRows + r] : 0.0f;
      tail[r] = to_bf16 ? round_to_bf16(x) : x;
    }
  }
}

// Asks for a row of D floats in L1 ahead of its use. The loops that go row by row over q, k, v, out,
// dq, dk or dv (rows H·D floats apart) ask kPrefetchRows rows ahead; a transposing gather, for the
// next panel's rows (-3 % of the time at S = 256, D = 32, caches cold).
inline void prefetch_row(const float* row, int D) {
  for (int d = 0; d < D; d += 16) _mm_prefetch(reinterpret_cast<const char*>(row + d), _MM_HINT_T0);
}
constexpr int kPrefetchRows = 8;

// One panel of a transposed tile from up to kPanel rows of D floats: dst[d·kPanel + c] = scale ·
// rows[c·row_stride + d] for the columns c < count, 0 past it (1 <= count; rows past it are not read),
// rounded to bf16 after the scaling with to_bf16. Gathers, so that each row is read where it lies
// (rows of q, k, v are H·D floats apart), after asking for the `next` rows that follow the panel's
// kPanel (the next panel's).
inline void transpose_into_panel(float* dst, const float* rows, int64_t row_stride, int count, int next, int D,
                                 float scale, bool to_bf16 = false) {
  for (int c = 0; c < next; ++c) prefetch_row(rows + (kPanel + c) * row_stride, D);
  const Vec factor = vset<Vec>(scale);
  for (int half = 0; half < 2; ++half) {
    float* dst_half = dst + half * kLanes;
    if (count <= half * kLanes) {
      for (int d = 0; d < D; ++d) vstore(dst_half + d * kPanel, vset<Vec>(0.0f));
      continue;
    }
    const VecI lane = ilanes<Vec>(half * kLanes);
    const Mask valid = greater(iset<Vec>(count), lane);
    const VecI index = imul(imin(lane, iset<Vec>(count - 1)), iset<Vec>(static_cast<int32_t>(row_stride)));
    for (int d = 0; d < D; ++d) {
      const Vec x = vmul(vgather(rows + d, index), factor);
      vstore(dst_half + d * kPanel, zero_unless(valid, to_bf16 ? vround_bf16(x) : x));
    }
  }
}

// One row from one column of a transposed panel: row[d] = scale · column[d·kPanel], or += with kAdd.
template <bool kAdd>
inline void column_to_row(float* row, const float* column, int D, float scale) {
  const VecI index = imul(ilanes<Vec>(0), iset<Vec>(kPanel));
  const Vec factor = vset<Vec>(scale);
  int d = 0;
  for (; d + kLanes <= D; d += kLanes) {
    Vec x = vmul(vgather(column + d * kPanel, index), factor);
    if constexpr (kAdd) x = vadd(vload<Vec>(row + d), x);
    vstore(row + d, x);
  }
  for (; d < D; ++d) row[d] = kAdd ? row[d] + scale * column[d * kPanel] : scale * column[d * kPanel];
}

}  // namespace fpdt::kernels::cpu

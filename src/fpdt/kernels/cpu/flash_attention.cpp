// Flash attention on the CPU (API and masking rule: cpu_backend.h). FlashAttention-2 tiling with
// micro-kernels of our own (no BLAS), AVX-512 where the build targets it, else AVX2/FMA, parallel
// across tiles with OpenMP.
//
// Every product is a "panel GEMM": C (M × P) = / += A (M × K) · B (K × P), with the P columns one
// contiguous panel of two vectors (P = 32 on AVX-512, 16 on AVX2) and A broadcast a row at a time by
// a kRows × P register tile (8 × 32: 16 zmm accumulators; 6 × 16: 12 ymm). Both widths run the same
// arithmetic in the same order, so they give the same results. Operands are laid out so that vectors
// always run along tokens (queries or keys), never along the head dim D — hence any D works, and the
// softmax reductions are vertical:
//   forward, task (b, q head, 192 queries), over 96-key tiles: Sᵀ (keys × queries) = K · Qᵀ,
//     online softmax down the key rows, Oᵀ (D × queries) = α ∘ Oᵀ + Vᵀ · Pᵀ; scores are in log2
//     units (scale·log2 e folded into the packed Qᵀ) so p = 2^(s − m) by a polynomial exp2.
//   backward, task (b, kv head, 192 keys), over the 96-query tiles that see it and the q heads of the
//     group: S = Q Kᵀ and dP = dO Vᵀ (queries × keys), P = 2^(S − lse), dS = P ∘ (dP − Δ),
//     dVᵀ += dOᵀ P, dKᵀ += Qᵀ dS (accumulated per task, written once), dQ_tile = dS K.
//     dQ tiles are added to dq in kv-tile order, each (b, q head, q tile) guarded by a turn counter,
//     so dq is deterministic without a per-thread copy of it (tasks go out in increasing order,
//     and a task only ever waits for a lower-numbered one: no deadlock).
// Tiles wholly outside the mask by position (above the causal diagonal, or before a sliding window)
// are never visited: a forward task starts at the first kv tile its window reaches, a backward task
// stops at the last q tile that can see its keys. Tiles the diagonal (or the window's edge) crosses
// are computed down to kPanel × kRows blocks: forward, each panel of queries takes only the keys of
// the tile its queries may see (Span, keys_seen); backward, each key panel only the q rows that may
// see it (rows_seeing), and each dQ row group only the keys it may see. (At S = 256 whole tiles
// computed 1.6× the visible pairs; these blocks, 1.1×.)
// Before the tasks, the operand a task streams through (K and V forward, Q and dO backward) is
// copied per (b, kv head) into contiguous tiles: in place its rows sit H·D floats apart, a page or
// half a page each, and streaming them stalled on TLB and cache misses. The transposed operands a
// task builds for itself (Qᵀ forward, Kᵀ and Vᵀ backward) are gathered a panel at a time, and its
// transposed results (Oᵀ, dKᵀ, dVᵀ) gathered back into rows.
// Scratch is one workspace owned by the calling thread, grown when a call needs more and reused:
// a few tiles per OpenMP thread (size set by D) plus the packed copies (capped, see
// set_pack_budget_floats), and in backward one counter per (b, q head, q tile).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cpu/cpu_backend.h"

// GCC 12's AVX-512 intrinsics initialise their "undefined" pass-through operands from themselves, which
// its own -Wmaybe-uninitialized then reports at every inlined use (GCC bug 105593, fixed in GCC 13).
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace fpdt::kernels::cpu {

namespace {

// ---------------------------------------------------------------------------------------------
// The vector width, chosen here once: Vec holds kLanes floats, a panel is two of them (kPanel tokens),
// and a register tile has kRows rows (2·kRows accumulators: 16 of the 32 zmm, 12 of the 16 ymm).
// Mask is a lane mask from integer comparisons (visibility of (query, key) pairs).
#if defined(__AVX512F__)
using Vec = __m512;
using VecI = __m512i;
using Mask = __mmask16;
constexpr int kLanes = 16;
constexpr int kRows = 8;
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vset(float x) { return _mm512_set1_ps(x); }
inline Vec vbroadcast(const float* p) { return _mm512_set1_ps(*p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec vmax(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline Vec vround(Vec x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline Vec vpow2i(Vec n) {  // 2^n for integral n in [−127, 127] (n = −127: 0)
  const VecI biased = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_castsi512_ps(_mm512_slli_epi32(biased, 23));
}
inline VecI iload(const int32_t* p) { return _mm512_loadu_si512(p); }
inline VecI iset(int32_t x) { return _mm512_set1_epi32(x); }
inline VecI ilanes(int32_t first) {  // first, first + 1, …
  return _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), iset(first));
}
inline VecI imul(VecI a, VecI b) { return _mm512_mullo_epi32(a, b); }
inline VecI imin(VecI a, VecI b) { return _mm512_min_epi32(a, b); }
inline Vec vgather(const float* base, VecI index) { return _mm512_i32gather_ps(index, base, 4); }  // base[index]
inline Mask greater(VecI a, VecI b) { return _mm512_cmpgt_epi32_mask(a, b); }
inline Mask equal(VecI a, VecI b) { return _mm512_cmpeq_epi32_mask(a, b); }
inline Mask both(Mask a, Mask b) { return a & b; }
inline Mask equal(Vec a, Vec b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
inline Vec select(Mask m, Vec yes, Vec no) { return _mm512_mask_blend_ps(m, no, yes); }
inline Vec zero_unless(Mask m, Vec v) { return _mm512_maskz_mov_ps(m, v); }
#else
using Vec = __m256;
using VecI = __m256i;
using Mask = __m256i;  // all ones / all zeros per lane
constexpr int kLanes = 8;
constexpr int kRows = 6;
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vset(float x) { return _mm256_set1_ps(x); }
inline Vec vbroadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec vmax(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline Vec vround(Vec x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline Vec vpow2i(Vec n) {  // 2^n for integral n in [−127, 127] (n = −127: 0)
  const VecI biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
}
inline VecI iload(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline VecI iset(int32_t x) { return _mm256_set1_epi32(x); }
inline VecI ilanes(int32_t first) {  // first, first + 1, …
  return _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), iset(first));
}
inline VecI imul(VecI a, VecI b) { return _mm256_mullo_epi32(a, b); }
inline VecI imin(VecI a, VecI b) { return _mm256_min_epi32(a, b); }
inline Vec vgather(const float* base, VecI index) { return _mm256_i32gather_ps(base, index, 4); }  // base[index]
inline Mask greater(VecI a, VecI b) { return _mm256_cmpgt_epi32(a, b); }
inline Mask equal(VecI a, VecI b) { return _mm256_cmpeq_epi32(a, b); }
inline Mask both(Mask a, Mask b) { return _mm256_and_si256(a, b); }
inline Mask equal(Vec a, Vec b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)); }
inline Vec select(Mask m, Vec yes, Vec no) { return _mm256_blendv_ps(no, yes, _mm256_castsi256_ps(m)); }
inline Vec zero_unless(Mask m, Vec v) { return _mm256_and_ps(v, _mm256_castsi256_ps(m)); }
#endif
constexpr int kPanel = 2 * kLanes;  // columns of a register tile and width of every panel: two vectors

// Tile sizes (tokens); 96 = 12 row groups of 8 (16 of 6) = 3 panels of 32 (6 of 16). A forward
// task's working set at D = 128: Qᵀ and Oᵀ 96 KiB each, Sᵀ 72 KiB, a K and a V tile 48 KiB each —
// in L2, and 192 queries per K/V tile halve the K/V traffic of 96 (measured +10 % at D = 128, one
// thread, AVX2). A backward task of 192 keys adds into each dq tile half as often as one of 96 and
// packs its K, V once for twice the work (+5–15 % at S = 4K, D = 32–128, AVX-512; 288 was no better
// at D = 128 and worse on short blocks); its working set at D = 128 is ~700 KiB, in a 2 MiB L2.
constexpr int kFwdQueries = 192;  // queries per forward task (multiple of kPanel)
constexpr int kFwdKeys = 96;      // keys per forward step
constexpr int kBwdQueries = 96;   // queries per backward step
constexpr int kBwdKeys = 192;     // keys per backward task (multiple of kPanel)
constexpr int kFwdPanels = kFwdQueries / kPanel, kBwdPanels = kBwdKeys / kPanel;
// Cap on the packed K/V (forward) or Q/dO (backward) copy of one call: set_pack_budget_floats.
std::atomic<int64_t> pack_budget_floats{int64_t{8} << 20};
static_assert(kFwdQueries % kPanel == 0 && kBwdKeys % kPanel == 0, "token-vector tiles must be whole panels");
static_assert(kFwdKeys % kRows == 0 && kBwdQueries % kRows == 0, "token-row tiles must be whole row groups");

constexpr float kLog2e = 1.4426950408889634f;
constexpr double kLn2 = 0.6931471805599453;
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// exp2 on a vector: 2^x = 2^n · 2^f, n = round(x), f ∈ [−½, ½], 2^f by the Cephes exp2f polynomial
// (relative error ≤ 2e-7). x ≤ −127 (including −inf) gives exactly 0, so masked scores vanish.
// Inputs here are never above ~0 (scores minus a running max or minus the final lse).
inline Vec exp2_ps(Vec x) {
  x = vmax(x, vset(-127.0f));
  const Vec n = vround(x);
  const Vec f = vsub(x, n);
  Vec p = vset(1.535336188319500e-4f);
  p = vfma(p, f, vset(1.339887440266574e-3f));
  p = vfma(p, f, vset(9.618437357674640e-3f));
  p = vfma(p, f, vset(5.550332471162809e-2f));
  p = vfma(p, f, vset(2.402264791363012e-1f));
  p = vfma(p, f, vset(6.931472028550421e-1f));
  p = vfma(p, f, vset(1.0f));
  return vmul(p, vpow2i(n));
}

// ---------------------------------------------------------------------------------------------
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
#define FPDT_FMA(r)                             \
  if constexpr (R > r) {                        \
    const Vec ar = vbroadcast(FPDT_A_AT(r));    \
    c##r##0 = vfma(ar, b0, c##r##0);            \
    c##r##1 = vfma(ar, b1, c##r##1);            \
  }
template <int R, Layout kA, Store kStore>
inline void register_tile(int K, const float* __restrict a, int64_t a_stride, const float* __restrict b,
                          float* __restrict c, const float* __restrict col_scale) {
  static_assert(R >= 1 && R <= kRows && kRows <= 8, "a register tile has 1 to kRows (at most 8) rows");
#define FPDT_DECLARE(r) Vec c##r##0 = vset(0.0f), c##r##1 = vset(0.0f);
  FPDT_FOR_ROWS(FPDT_DECLARE)
#undef FPDT_DECLARE
  if constexpr (kStore != Store::overwrite) {
    Vec s0 = vset(1.0f), s1 = s0;
    if constexpr (kStore == Store::rescale) {
      s0 = vload(col_scale);
      s1 = vload(col_scale + kLanes);
    }
#define FPDT_LOAD(r)                                 \
  if constexpr (R > r) {                             \
    c##r##0 = vload(c + r * kPanel);                 \
    c##r##1 = vload(c + r * kPanel + kLanes);        \
    if constexpr (kStore == Store::rescale) {        \
      c##r##0 = vmul(c##r##0, s0);                   \
      c##r##1 = vmul(c##r##1, s1);                   \
    }                                                \
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
          const Vec b0 = vload(bg + kPanel * kk), b1 = vload(bg + kPanel * kk + kLanes);
#define FPDT_A_AT(r) (ag + kRows * r + kk)
          FPDT_FOR_ROWS(FPDT_FMA)
#undef FPDT_A_AT
        }
      } else {
        for (int kk = 0; kk < K - k0; ++kk) {
          const Vec b0 = vload(bg + kPanel * kk), b1 = vload(bg + kPanel * kk + kLanes);
#define FPDT_A_AT(r) (ag + kRows * r + kk)
          FPDT_FOR_ROWS(FPDT_FMA)
#undef FPDT_A_AT
        }
      }
    }
  } else {
    for (int k = 0; k < K; ++k) {
      const Vec b0 = vload(b + kPanel * k), b1 = vload(b + kPanel * k + kLanes);
#define FPDT_A_AT(r) (kA == Layout::packed ? a + kRows * k + r : a + r * a_stride + k)
      FPDT_FOR_ROWS(FPDT_FMA)
#undef FPDT_A_AT
    }
  }
#define FPDT_STORE(r)                          \
  if constexpr (R > r) {                       \
    vstore(c + r * kPanel, c##r##0);           \
    vstore(c + r * kPanel + kLanes, c##r##1);  \
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
// zero past D (the A operand of a product whose rows are head dims).
inline void pack_row_by_groups(float* dst, int64_t group_stride, const float* row, int D) {
  int g = 0;
  for (; (g + 1) * kRows <= D; ++g) std::memcpy(dst + g * group_stride, row + g * kRows, kRows * sizeof(float));
  if (g * kRows < D) {
    float* tail = dst + g * group_stride;
    for (int r = 0; r < kRows; ++r) tail[r] = g * kRows + r < D ? row[g * kRows + r] : 0.0f;
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
// rows[c·row_stride + d] for the columns c < count, 0 past it (1 <= count; rows past it are not read).
// Gathers, so that each row is read where it lies (rows of q, k, v are H·D floats apart), after
// asking for the `next` rows that follow the panel's kPanel (the next panel's).
inline void transpose_into_panel(float* dst, const float* rows, int64_t row_stride, int count, int next, int D,
                                 float scale) {
  for (int c = 0; c < next; ++c) prefetch_row(rows + (kPanel + c) * row_stride, D);
  const Vec factor = vset(scale);
  for (int half = 0; half < 2; ++half) {
    float* dst_half = dst + half * kLanes;
    if (count <= half * kLanes) {
      for (int d = 0; d < D; ++d) vstore(dst_half + d * kPanel, vset(0.0f));
      continue;
    }
    const VecI lane = ilanes(half * kLanes);
    const Mask valid = greater(iset(count), lane);
    const VecI index = imul(imin(lane, iset(count - 1)), iset(static_cast<int32_t>(row_stride)));
    for (int d = 0; d < D; ++d) vstore(dst_half + d * kPanel, zero_unless(valid, vmul(vgather(rows + d, index), factor)));
  }
}

// One row from one column of a transposed panel: row[d] = scale · column[d·kPanel], or += with kAdd.
template <bool kAdd>
inline void column_to_row(float* row, const float* column, int D, float scale) {
  const VecI index = imul(ilanes(0), iset(kPanel));
  const Vec factor = vset(scale);
  int d = 0;
  for (; d + kLanes <= D; d += kLanes) {
    Vec x = vmul(vgather(column + d * kPanel, index), factor);
    if constexpr (kAdd) x = vadd(vload(row + d), x);
    vstore(row + d, x);
  }
  for (; d < D; ++d) row[d] = kAdd ? row[d] + scale * column[d * kPanel] : scale * column[d * kPanel];
}

// ---------------------------------------------------------------------------------------------
// Workspace: 64-byte aligned floats owned by the calling thread, grown (never shrunk) on demand.
class Workspace {
 public:
  float* floats(size_t count) {
    if (count > capacity_) {
      const size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
      data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (!data_)
        throw Error("attention",
                    "cannot allocate " + format_bytes(static_cast<double>(bytes)) + " of attention scratch");
      capacity_ = count;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  size_t capacity_ = 0;
};

// Turn counters of the backward dq accumulation, grown on demand like the workspace.
class Counters {
 public:
  std::atomic<int32_t>* zeroed(size_t count) {
    if (count > capacity_) {
      data_ = std::make_unique<std::atomic<int32_t>[]>(count);
      capacity_ = count;
    }
    for (size_t i = 0; i < count; ++i) data_[i].store(0, std::memory_order_relaxed);
    return data_.get();
  }

 private:
  std::unique_ptr<std::atomic<int32_t>[]> data_;
  size_t capacity_ = 0;
};

Workspace& kernel_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

// Hands out 64-byte aligned slices of one per-thread region; with a null base it only measures.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(size_t count) {
    float* slice = base_ ? base_ + used_ : nullptr;
    used_ += (count + 15) / 16 * 16;
    return slice;
  }
  int32_t* take_ints(size_t count) { return reinterpret_cast<int32_t*>(take(count)); }
  size_t used() const { return used_; }

 private:
  float* base_;
  size_t used_ = 0;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int row_groups(int D) { return (D + kRows - 1) / kRows; }
int panels(int D) { return (D + kPanel - 1) / kPanel; }

// Document ids of a tile: smallest and largest.
struct DocRange {
  int32_t lo = 0, hi = 0;
};
DocRange doc_range(const int32_t* docs, int n) {
  DocRange range{docs[0], docs[0]};
  for (int i = 1; i < n; ++i) {
    range.lo = std::min(range.lo, docs[i]);
    range.hi = std::max(range.hi, docs[i]);
  }
  return range;
}

// How a (q tile, kv tile) pair is masked: skip (no visible pair), full (every pair visible) or mask.
// By position: the pair nearest the diagonal (q_last, k_first) is the first to fall above it, the
// farthest (q_first, k_last) the first to fall out of the window; docs may mask any pair.
enum class TileMask { skip, full, mask };
TileMask classify(int64_t q_first, int64_t q_last, int64_t k_first, int64_t k_last, int64_t window, bool has_docs,
                  DocRange q_docs, DocRange k_docs) {
  if (!block_has_visible_pair(q_first, q_last - q_first + 1, k_first, k_last - k_first + 1, window))
    return TileMask::skip;
  bool need_mask = !position_visible(q_first, k_last, window) || !position_visible(q_last, k_first, window);
  if (has_docs) {
    if (q_docs.hi < k_docs.lo || k_docs.hi < q_docs.lo) return TileMask::skip;
    if (!(q_docs.lo == q_docs.hi && k_docs.lo == k_docs.hi && q_docs.lo == k_docs.lo)) need_mask = true;
  }
  return need_mask ? TileMask::mask : TileMask::full;
}

int32_t clamp_to_int(int64_t value, int64_t lo, int64_t hi) { return static_cast<int32_t>(std::clamp(value, lo, hi)); }

// Rows [begin, end) of a tile that one panel of the other side needs, and whether they need the mask.
struct Span {
  int begin = 0, end = 0;
  bool masked = false;
};
// The keys of a kv tile (nk keys from position k_first) that some query of positions [q_first, q_last]
// may see by position, begin rounded down to a whole key group; empty if none.
Span keys_seen(int64_t q_first, int64_t q_last, int64_t k_first, int nk, int64_t window) {
  const int64_t end = std::min<int64_t>(nk, q_last - k_first + 1);
  const int64_t begin = window == 0 ? 0 : std::max<int64_t>(0, q_first - window + 1 - k_first) / kRows * kRows;
  if (end <= begin) return {};
  return {static_cast<int>(begin), static_cast<int>(end)};
}
// The rows of a q tile (mq queries from position q_first) that may see some key of positions
// [k_first, k_last] by position, rounded out to whole row groups (end at most mq); empty if none.
Span rows_seeing(int64_t q_first, int mq, int64_t k_first, int64_t k_last, int64_t window) {
  const int64_t begin = std::max<int64_t>(0, k_first - q_first) / kRows * kRows;
  const int64_t end =
      window == 0 ? mq : std::min<int64_t>(mq, ceil_div(std::max<int64_t>(0, k_last + window - q_first), kRows) * kRows);
  if (end <= begin) return {};
  return {static_cast<int>(begin), static_cast<int>(end)};
}

// A panel's visibility mask (two vectors) narrowed by another condition: vis &= cond.
inline void keep(Mask& vis0, Mask& vis1, Mask cond0, Mask cond1) {
  vis0 = both(vis0, cond0);
  vis1 = both(vis1, cond1);
}

// =============================================================================================
// Forward

struct ForwardScratch {
  float* qt;        // [panel][D][kPanel] Qᵀ of the task's queries, times scale·log2 e; zero past mq
  float* st;        // [panel][kFwdKeys][kPanel] Sᵀ, then Pᵀ, of one kv tile
  float* ot;        // [panel][D][kPanel] Oᵀ accumulator (unnormalised)
  float* m;         // (kFwdQueries) running max, log2 units
  float* l;         // (kFwdQueries) running sum
  float* alpha;     // (kFwdQueries) rescale of this step
  float* m_init;    // (kFwdQueries) m at the start (accumulate mode)
  int32_t* q_docs;  // (kFwdQueries)
  int32_t* k_docs;  // (kFwdKeys)

  ForwardScratch(float* base, int D) { carve(Carver(base), D, this); }
  static size_t floats(int D) { return carve(Carver(nullptr), D, nullptr); }

 private:
  static size_t carve(Carver carve, int D, ForwardScratch* s) {
    const size_t panels_q = kFwdQueries / kPanel;
    float* qt = carve.take(panels_q * D * kPanel);
    float* st = carve.take(panels_q * kFwdKeys * kPanel);
    float* ot = carve.take(panels_q * D * kPanel);
    float* m = carve.take(kFwdQueries);
    float* l = carve.take(kFwdQueries);
    float* alpha = carve.take(kFwdQueries);
    float* m_init = carve.take(kFwdQueries);
    int32_t* q_docs = carve.take_ints(kFwdQueries);
    int32_t* k_docs = carve.take_ints(kFwdKeys);
    if (s) *s = ForwardScratch{qt, st, ot, m, l, alpha, m_init, q_docs, k_docs};
    return carve.used();
  }
  ForwardScratch(float* qt, float* st, float* ot, float* m, float* l, float* alpha, float* m_init, int32_t* q_docs,
                 int32_t* k_docs)
      : qt(qt), st(st), ot(ot), m(m), l(l), alpha(alpha), m_init(m_init), q_docs(q_docs), k_docs(k_docs) {}
};

// Online softmax of nk keys of a kv tile over one panel of kPanel queries. sp: the panel's Sᵀ rows
// (nk × kPanel), replaced by Pᵀ; k_first_rel: the first key's position minus the task's first query's;
// k_docs: (nk). Updates m, l and writes alpha for the queries at offset i0 of the task.
template <bool kMasked>
void softmax_panel(float* sp, int nk, int i0, ForwardScratch& s, int64_t k_first_rel, const int32_t* k_docs,
                   int64_t window, bool has_docs) {
  Vec mx0 = vload(s.m + i0), mx1 = vload(s.m + i0 + kLanes);
  const Vec m_old0 = mx0, m_old1 = mx1;
  const Vec neg_inf = vset(-kInf);
  if constexpr (kMasked) {
    // Query i (of the task) sees key j iff i >= k_first_rel + j (causal), i < k_first_rel + j + window
    // (with a window), and docs match.
    const VecI i_lane0 = ilanes(i0), i_lane1 = ilanes(i0 + kLanes);
    VecI q_doc0 = iset(0), q_doc1 = iset(0);
    if (has_docs) {
      q_doc0 = iload(s.q_docs + i0);
      q_doc1 = iload(s.q_docs + i0 + kLanes);
    }
    for (int j = 0; j < nk; ++j) {
      // visible iff i > first_visible − 1, with the threshold clamped into int32 range
      const VecI threshold = iset(clamp_to_int(k_first_rel + j - 1, -1, kFwdQueries));
      Mask vis0 = greater(i_lane0, threshold), vis1 = greater(i_lane1, threshold);
      if (window > 0) {  // visible iff i < end, the end clamped into int32 range
        const VecI end = iset(clamp_to_int(k_first_rel + j + window, -1, kFwdQueries + 1));
        keep(vis0, vis1, greater(end, i_lane0), greater(end, i_lane1));
      }
      if (has_docs) {
        const VecI k_doc = iset(k_docs[j]);
        keep(vis0, vis1, equal(q_doc0, k_doc), equal(q_doc1, k_doc));
      }
      const Vec s0 = select(vis0, vload(sp + j * kPanel), neg_inf);
      const Vec s1 = select(vis1, vload(sp + j * kPanel + kLanes), neg_inf);
      vstore(sp + j * kPanel, s0);
      vstore(sp + j * kPanel + kLanes, s1);
      mx0 = vmax(mx0, s0);
      mx1 = vmax(mx1, s1);
    }
  } else {
    for (int j = 0; j < nk; ++j) {
      mx0 = vmax(mx0, vload(sp + j * kPanel));
      mx1 = vmax(mx1, vload(sp + j * kPanel + kLanes));
    }
  }
  // A query that has seen nothing yet keeps m = −inf; subtract 0 instead so that 2^(−inf) = 0.
  const Vec use0 = select(equal(mx0, neg_inf), vset(0.0f), mx0);
  const Vec use1 = select(equal(mx1, neg_inf), vset(0.0f), mx1);
  const Vec alpha0 = exp2_ps(vsub(m_old0, use0));
  const Vec alpha1 = exp2_ps(vsub(m_old1, use1));
  Vec sum0 = vset(0.0f), sum1 = vset(0.0f);
  for (int j = 0; j < nk; ++j) {
    const Vec p0 = exp2_ps(vsub(vload(sp + j * kPanel), use0));
    const Vec p1 = exp2_ps(vsub(vload(sp + j * kPanel + kLanes), use1));
    vstore(sp + j * kPanel, p0);
    vstore(sp + j * kPanel + kLanes, p1);
    sum0 = vadd(sum0, p0);
    sum1 = vadd(sum1, p1);
  }
  vstore(s.m + i0, mx0);
  vstore(s.m + i0 + kLanes, mx1);
  vstore(s.alpha + i0, alpha0);
  vstore(s.alpha + i0 + kLanes, alpha1);
  vstore(s.l + i0, vfma(vload(s.l + i0), alpha0, sum0));
  vstore(s.l + i0 + kLanes, vfma(vload(s.l + i0 + kLanes), alpha1, sum1));
}

// One forward task: queries [q_lo, q_lo + mq) of head h in batch b, over every kv tile of the block.
// k_head: [kv tile][key group][D][kRows] the kv head's K; v_head: [kv tile][D group][kFwdKeys][kRows] its V
// (both packed once per call by attention_chunk_forward).
void forward_task(float* out, float* lse, const AttentionChunkParams& p, bool accumulate, int b, int h, int64_t q_lo,
                  const float* k_head, const float* v_head, ForwardScratch& s) {
  const int D = p.D;
  const int mq = static_cast<int>(std::min<int64_t>(kFwdQueries, p.Cq - q_lo));
  const int panels_q = (mq + kPanel - 1) / kPanel;
  const int64_t q_first = p.q_begin + q_lo, q_last = q_first + mq - 1;
  const int64_t q_row_stride = static_cast<int64_t>(p.H) * D;
  const float* q_rows = p.q + ((b * p.Cq + q_lo) * p.H + h) * D;  // row i at + i·q_row_stride
  float* out_rows = out + ((b * p.Cq + q_lo) * p.H + h) * D;
  float* lse_row = lse + (static_cast<int64_t>(b) * p.H + h) * p.Cq + q_lo;  // (mq)
  const bool has_docs = p.q_doc_ids != nullptr;

  // Running state over panels_q·kPanel columns; columns past mq are padding that is never written out.
  // Qᵀ is zero there, so those columns stay finite.
  const float qk_scale = static_cast<float>(p.scale) * kLog2e;
  for (int i = 0; i < panels_q * kPanel; ++i) {
    const bool resume = accumulate && i < mq && lse_row[i] > -kInf;
    s.m[i] = resume ? lse_row[i] * kLog2e : -kInf;
    s.l[i] = resume ? 1.0f : 0.0f;
    s.m_init[i] = s.m[i];
  }
  for (int panel = 0; panel < panels_q; ++panel) {
    const int64_t i0 = static_cast<int64_t>(panel) * kPanel;
    const int count = static_cast<int>(std::min<int64_t>(kPanel, mq - i0));
    const int next = static_cast<int>(std::clamp<int64_t>(mq - i0 - kPanel, 0, kPanel));
    transpose_into_panel(s.qt + panel * D * kPanel, q_rows + i0 * q_row_stride, q_row_stride, count, next, D,
                         qk_scale);
    float* ot = s.ot + panel * D * kPanel;
    if (!accumulate) {
      std::fill(ot, ot + D * kPanel, 0.0f);
      continue;
    }
    transpose_into_panel(ot, out_rows + i0 * q_row_stride, q_row_stride, count, next, D, 1.0f);
    for (int c = 0; c < count; ++c)  // a row that has seen nothing yet starts from 0, not from out
      if (s.m_init[i0 + c] == -kInf)
        for (int d = 0; d < D; ++d) ot[d * kPanel + c] = 0.0f;
  }
  DocRange q_docs;
  if (has_docs) {
    const int32_t* docs = p.q_doc_ids + b * p.Cq + q_lo;
    for (int i = 0; i < kFwdQueries; ++i) s.q_docs[i] = docs[std::min(i, mq - 1)];
    q_docs = doc_range(docs, mq);
  }

  // kv tiles that some query of the task may see: causally, kv_begin + kv_lo <= q_last; with a window,
  // the tile's last key after q_first − window.
  const int64_t kv_tiles =
      q_last < p.kv_begin ? 0 : std::min(ceil_div(p.Ck, kFwdKeys), (q_last - p.kv_begin) / kFwdKeys + 1);
  const int64_t first_tile = p.window == 0 ? 0 : std::max<int64_t>(0, q_first - p.window + 1 - p.kv_begin) / kFwdKeys;
  for (int64_t tile = first_tile; tile < kv_tiles; ++tile) {
    const int64_t kv_lo = tile * kFwdKeys;
    const int nk = static_cast<int>(std::min<int64_t>(kFwdKeys, p.Ck - kv_lo));
    const int64_t k_first = p.kv_begin + kv_lo, k_last = k_first + nk - 1;
    DocRange k_docs;
    if (has_docs) {
      std::memcpy(s.k_docs, p.kv_doc_ids + b * p.Ck + kv_lo, sizeof(int32_t) * nk);
      k_docs = doc_range(s.k_docs, nk);
    }
    const TileMask mask = classify(q_first, q_last, k_first, k_last, p.window, has_docs, q_docs, k_docs);
    if (mask == TileMask::skip) continue;
    // Per panel, the keys [begin, end) of the tile that some of its queries may see by position (begin
    // a whole key group), and whether they need the mask: on the diagonal a panel skips the keys after
    // its last query, so the tile is computed down to kPanel × kRows blocks, not whole.
    Span keys[kFwdPanels];
    for (int panel = 0; panel < panels_q; ++panel) {
      const int64_t panel_first = q_first + panel * kPanel, panel_last = std::min(panel_first + kPanel - 1, q_last);
      Span& range = keys[panel];
      range = keys_seen(panel_first, panel_last, k_first, nk, p.window);
      if (mask == TileMask::full || range.end <= range.begin) continue;
      const TileMask panel_mask = classify(panel_first, panel_last, k_first + range.begin, k_first + range.end - 1,
                                           p.window, has_docs, q_docs, k_docs);
      if (panel_mask == TileMask::skip) range = {};
      range.masked = panel_mask == TileMask::mask;
    }

    // Sᵀ (keys × kPanel per panel) = K_tile · Qᵀ_panel, in log2 units. Key groups outer: a group's K
    // rows stay in L1 while the Qᵀ panels stream past.
    const float* k_tile = k_head + kv_lo * D;  // [key group][D][kRows]
    for (int j0 = 0; j0 < nk; j0 += kRows)
      for (int panel = 0; panel < panels_q; ++panel)
        if (keys[panel].begin <= j0 && j0 < keys[panel].end)
          panel_gemm<Layout::packed, Store::overwrite>(std::min(kRows, keys[panel].end - j0), D, k_tile + j0 * D, 0, 0,
                                                       s.qt + panel * D * kPanel, s.st + (panel * kFwdKeys + j0) * kPanel);
    const float* v_tile = v_head + tile * row_groups(D) * kFwdKeys * kRows;
    for (int panel = 0; panel < panels_q; ++panel) {
      const Span range = keys[panel];
      if (range.end <= range.begin) continue;
      float* sp = s.st + (panel * kFwdKeys + range.begin) * kPanel;
      const int n = range.end - range.begin;
      if (range.masked) {
        softmax_panel<true>(sp, n, panel * kPanel, s, k_first + range.begin - q_first, s.k_docs + range.begin,
                            p.window, has_docs);
      } else {
        softmax_panel<false>(sp, n, panel * kPanel, s, 0, nullptr, 0, false);
      }
      // Oᵀ_panel (D × kPanel) = α ∘ Oᵀ_panel + Vᵀ (D × n) · Pᵀ_panel (n × kPanel)
      panel_gemm<Layout::packed, Store::rescale>(D, n, v_tile + range.begin * kRows, 0, kFwdKeys * kRows, sp,
                                                 s.ot + panel * D * kPanel, s.alpha + panel * kPanel);
    }
  }

  for (int i = 0; i < mq; ++i) {
    const float l = s.l[i];
    float* out_row = out_rows + i * q_row_stride;
    if (l == 0.0f) {  // nothing visible, ever
      if (!accumulate) {
        for (int d = 0; d < D; ++d) out_row[d] = 0.0f;
        lse_row[i] = -kInf;
      }
      continue;
    }
    if (accumulate && l == 1.0f && s.m[i] == s.m_init[i]) continue;  // this block added nothing
    if (i + kPrefetchRows < mq) prefetch_row(out_row + kPrefetchRows * q_row_stride, D);
    column_to_row<false>(out_row, s.ot + (i / kPanel) * D * kPanel + i % kPanel, D, 1.0f / l);
    lse_row[i] = static_cast<float>((static_cast<double>(s.m[i]) + std::log2(static_cast<double>(l))) * kLn2);
  }
}

// =============================================================================================
// Backward

struct BackwardScratch {
  float* kt;        // [key panel][D][kPanel] Kᵀ of the task's keys × scale·log2 e (0 past nk)
  float* vt;        // [key panel][D][kPanel] Vᵀ (0 past nk)
  float* kp;        // [D panel][kBwdKeys][kPanel] K × scale, by panels of kPanel head dims (0 past D)
  float* dkt;       // [key panel][D][kPanel] dKᵀ accumulator (unscaled)
  float* dvt;       // [key panel][D][kPanel] dVᵀ accumulator
  float* sp;        // [key panel][kBwdQueries][kPanel] S, then P
  float* dpp;       // [key panel][kBwdQueries][kPanel] dP, then dS
  float* ds;        // (kBwdQueries, kBwdKeys) dS row-major
  float* dq;        // [D panel][kBwdQueries][kPanel] this pair's dQ tile
  float* lse2;      // (kBwdQueries) lse · log2 e (+inf for a row that saw nothing)
  float* delta;     // (kBwdQueries)
  int32_t* q_docs;  // (kBwdQueries)
  int32_t* k_docs;  // (kBwdKeys), padded to whole panels

  BackwardScratch(float* base, int D) { carve(Carver(base), D, this); }
  static size_t floats(int D) { return carve(Carver(nullptr), D, nullptr); }

 private:
  static size_t carve(Carver carve, int D, BackwardScratch* s) {
    const size_t key_panels = kBwdKeys / kPanel;
    float* slices[11];
    const size_t sizes[11] = {
        key_panels * D * kPanel,
        key_panels * D * kPanel,
        static_cast<size_t>(panels(D)) * kBwdKeys * kPanel,
        key_panels * D * kPanel,
        key_panels * D * kPanel,
        key_panels * kBwdQueries * kPanel,
        key_panels * kBwdQueries * kPanel,
        static_cast<size_t>(kBwdQueries) * kBwdKeys,
        static_cast<size_t>(panels(D)) * kBwdQueries * kPanel,
        kBwdQueries,
        kBwdQueries,
    };
    for (int i = 0; i < 11; ++i) slices[i] = carve.take(sizes[i]);
    int32_t* q_docs = carve.take_ints(kBwdQueries);
    int32_t* k_docs = carve.take_ints(kBwdKeys);
    if (s) {
      s->kt = slices[0];
      s->vt = slices[1];
      s->kp = slices[2];
      s->dkt = slices[3];
      s->dvt = slices[4];
      s->sp = slices[5];
      s->dpp = slices[6];
      s->ds = slices[7];
      s->dq = slices[8];
      s->lse2 = slices[9];
      s->delta = slices[10];
      s->q_docs = q_docs;
      s->k_docs = k_docs;
    }
    return carve.used();
  }
};

// P and dS of one key panel of a pair from S and dP, for the rows [begin, end) of the q tile.
// Query i sees key j (of the kv tile) iff j <= q_rel + i (clamped; also < nk), j > q_rel + i − window
// (with a window), and docs match.
template <bool kMasked>
void probabilities_and_ds(BackwardScratch& s, int panel, Span rows, int64_t q_rel, int nk, int64_t window,
                          bool has_docs) {
  float* sp = s.sp + panel * kBwdQueries * kPanel;
  float* dpp = s.dpp + panel * kBwdQueries * kPanel;
  float* ds = s.ds + panel * kPanel;
  const VecI j0 = ilanes(panel * kPanel), j1 = ilanes(panel * kPanel + kLanes);
  VecI k_doc0 = iset(0), k_doc1 = iset(0);
  if (kMasked && has_docs) {
    k_doc0 = iload(s.k_docs + panel * kPanel);
    k_doc1 = iload(s.k_docs + panel * kPanel + kLanes);
  }
  for (int i = rows.begin; i < rows.end; ++i) {
    const Vec lse2 = vbroadcast(s.lse2 + i);
    const Vec delta = vbroadcast(s.delta + i);
    Vec p0 = exp2_ps(vsub(vload(sp + i * kPanel), lse2));
    Vec p1 = exp2_ps(vsub(vload(sp + i * kPanel + kLanes), lse2));
    if constexpr (kMasked) {
      // visible iff j < limit, limit = min(q_rel + i, nk − 1) + 1
      const VecI limit = iset(clamp_to_int(std::min<int64_t>(q_rel + i, nk - 1) + 1, 0, kBwdKeys));
      Mask vis0 = greater(limit, j0), vis1 = greater(limit, j1);
      if (window > 0) {  // visible iff j > before, before = q_rel + i − window (clamped)
        const VecI before = iset(clamp_to_int(q_rel + i - window, -1, kBwdKeys));
        keep(vis0, vis1, greater(j0, before), greater(j1, before));
      }
      if (has_docs) {
        const VecI q_doc = iset(s.q_docs[i]);
        keep(vis0, vis1, equal(k_doc0, q_doc), equal(k_doc1, q_doc));
      }
      p0 = zero_unless(vis0, p0);
      p1 = zero_unless(vis1, p1);
    }
    const Vec ds0 = vmul(p0, vsub(vload(dpp + i * kPanel), delta));
    const Vec ds1 = vmul(p1, vsub(vload(dpp + i * kPanel + kLanes), delta));
    vstore(sp + i * kPanel, p0);
    vstore(sp + i * kPanel + kLanes, p1);
    vstore(dpp + i * kPanel, ds0);
    vstore(dpp + i * kPanel + kLanes, ds1);
    vstore(ds + i * kBwdKeys, ds0);
    vstore(ds + i * kBwdKeys + kLanes, ds1);
  }
}

// Waits until it is kv tile `turn`'s turn to add into this (b, q head, q tile)'s dq.
void wait_for_turn(const std::atomic<int32_t>& counter, int32_t turn) {
  int spins = 0;
  while (counter.load(std::memory_order_acquire) != turn) {
    if (++spins < 256) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

struct BackwardArgs {
  float* dq;
  float* dk;
  float* dv;
  const float* dout;
  const float* lse;
  const float* delta;
  const AttentionChunkParams* p;
  std::atomic<int32_t>* counters;  // (B, H, q tiles)
  // Q and dO of the q heads of groups [first_group, …), packed per q tile as [D group][i][kRows]:
  // tile t of q head hg of group g at (((g − first_group)·H/Hkv + hg)·q_tiles + t)·tile_floats.
  const float* packed_q;
  const float* packed_do;
  int64_t first_group;
  int64_t tile_floats;
};

// The q tiles [first, end) the backward task of kv tile `kv_tile` visits: from the first whose last
// row (as if the q tile were whole) is causally at or after the kv tile's first key; with a window, up
// to the last whose first row is within the window of the kv tile's last key (as if it were whole).
// Both bounds grow with kv_tile, so the visitors of a q tile are consecutive kv tiles, and they add
// into its dq in order: first_visitor(q_tile), first_visitor + 1, …
struct QTileRange {
  int64_t first, end;
};
QTileRange visited_q_tiles(const AttentionChunkParams& p, int64_t kv_tile, int64_t q_tiles) {
  const int64_t k_first = p.kv_begin + kv_tile * kBwdKeys;
  const int64_t first = k_first <= p.q_begin ? 0 : std::min(q_tiles, (k_first - p.q_begin) / kBwdQueries);
  if (p.window == 0) return {first, q_tiles};
  const int64_t last_row = k_first + kBwdKeys - 1 + p.window - 1 - p.q_begin;  // of the q block, that sees a key
  const int64_t end = last_row < 0 ? 0 : std::min(q_tiles, last_row / kBwdQueries + 1);
  return {first, std::max(first, end)};
}

// The first kv tile whose backward task visits q tile `q_tile` (kv tile 0 without a window).
int64_t first_visitor(const AttentionChunkParams& p, int64_t q_tile, int64_t q_tiles) {
  if (p.window == 0) return 0;
  int64_t lo = 0, hi = ceil_div(p.Ck, kBwdKeys);  // bisection: the ranges' ends grow with the kv tile
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (visited_q_tiles(p, mid, q_tiles).end > q_tile) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// One backward task: keys [kv_lo, kv_lo + nk) of kv head kv_head in batch b, against every q tile
// that may see them and every q head of the group.
void backward_task(const BackwardArgs& args, int b, int kv_head, int64_t kv_tile, BackwardScratch& s) {
  const AttentionChunkParams& p = *args.p;
  const int D = p.D;
  const int group = p.H / p.Hkv;
  const int64_t kv_lo = kv_tile * kBwdKeys;
  const int nk = static_cast<int>(std::min<int64_t>(kBwdKeys, p.Ck - kv_lo));
  const int panels_k = (nk + kPanel - 1) / kPanel;
  const int64_t k_first = p.kv_begin + kv_lo, k_last = k_first + nk - 1;
  const int64_t q_tiles = ceil_div(p.Cq, kBwdQueries);
  const QTileRange visits = visited_q_tiles(p, kv_tile, q_tiles);
  const bool has_docs = p.q_doc_ids != nullptr;
  const int64_t k_row_stride = static_cast<int64_t>(p.Hkv) * D;
  const int d_panels = panels(D);
  const float qk_scale = static_cast<float>(p.scale) * kLog2e;
  const float scale = static_cast<float>(p.scale);

  DocRange k_docs;
  if (has_docs) {
    const int32_t* docs = p.kv_doc_ids + b * p.Ck + kv_lo;
    for (int j = 0; j < kBwdKeys; ++j) s.k_docs[j] = docs[std::min(j, nk - 1)];
    k_docs = doc_range(docs, nk);
  }
  bool packed = false;
  auto pack_kv = [&] {
    const float* k_rows = p.k + ((b * p.Ck + kv_lo) * p.Hkv + kv_head) * D;
    const float* v_rows = p.v + ((b * p.Ck + kv_lo) * p.Hkv + kv_head) * D;
    for (int panel = 0; panel < panels_k; ++panel) {
      const int j0 = panel * kPanel, count = std::min(kPanel, nk - j0), next = std::clamp(nk - j0 - kPanel, 0, kPanel);
      transpose_into_panel(s.kt + panel * D * kPanel, k_rows + j0 * k_row_stride, k_row_stride, count, next, D,
                           qk_scale);
      transpose_into_panel(s.vt + panel * D * kPanel, v_rows + j0 * k_row_stride, k_row_stride, count, next, D, 1.0f);
    }
    std::fill(s.dkt, s.dkt + panels_k * D * kPanel, 0.0f);
    std::fill(s.dvt, s.dvt + panels_k * D * kPanel, 0.0f);
    for (int j = 0; j < nk; ++j) {
      const float* k_row = k_rows + j * k_row_stride;
      for (int dp = 0; dp < d_panels; ++dp) {
        float* dst = s.kp + (dp * kBwdKeys + j) * kPanel;
        for (int c = 0; c < kPanel; ++c) {
          const int d = dp * kPanel + c;
          dst[c] = d < D ? k_row[d] * scale : 0.0f;
        }
      }
    }
    packed = true;
  };

  for (int64_t q_tile = visits.first; q_tile < visits.end; ++q_tile) {
    const int64_t q_lo = q_tile * kBwdQueries;
    const int mq = static_cast<int>(std::min<int64_t>(kBwdQueries, p.Cq - q_lo));
    const int64_t q_first = p.q_begin + q_lo, q_last = q_first + mq - 1;
    DocRange q_docs;
    if (has_docs) {
      std::memcpy(s.q_docs, p.q_doc_ids + b * p.Cq + q_lo, sizeof(int32_t) * mq);
      q_docs = doc_range(s.q_docs, mq);
    }
    TileMask mask = classify(q_first, q_last, k_first, k_last, p.window, has_docs, q_docs, k_docs);
    if (mask == TileMask::full && nk % kPanel != 0) mask = TileMask::mask;  // padding keys of the last panel
    if (mask != TileMask::skip && !packed) pack_kv();
    const int32_t turn = static_cast<int32_t>(kv_tile - first_visitor(p, q_tile, q_tiles));  // into this dq tile
    // Per key panel, the rows [begin, end) of the q tile that may see its keys by position, and whether
    // they need the mask: on the diagonal a key panel skips the queries before its first key, so the
    // pair is computed down to kRows × kPanel blocks, not whole. Both bounds grow with the panel, and
    // a panel is left out only by position (classify judges documents by the whole tiles' ranges), so
    // those come first or last: the key panels a row group needs are consecutive, and its dQ reads the
    // keys [dq_keys[g].begin, dq_keys[g].end).
    Span rows[kBwdPanels], dq_keys[kBwdQueries / kRows];
    if (mask != TileMask::skip) {
      for (int panel = 0; panel < panels_k; ++panel) {
        const int64_t panel_first = k_first + panel * kPanel, panel_last = std::min(panel_first + kPanel - 1, k_last);
        Span& range = rows[panel];
        range = rows_seeing(q_first, mq, panel_first, panel_last, p.window);
        if (range.end <= range.begin) continue;
        const TileMask panel_mask = mask == TileMask::full ? TileMask::full
                                                            : classify(q_first + range.begin, q_first + range.end - 1,
                                                                       panel_first, panel_last, p.window, has_docs,
                                                                       q_docs, k_docs);
        if (panel_mask == TileMask::skip) range = {};
        range.masked = panel_mask != TileMask::full || panel_last - panel_first + 1 < kPanel;  // or padding keys
      }
      for (int g = 0; g * kRows < mq; ++g) {
        int first = panels_k, end = 0;
        for (int panel = 0; panel < panels_k; ++panel) {
          if (rows[panel].begin <= g * kRows && g * kRows < rows[panel].end) {
            first = std::min(first, panel);
            end = panel + 1;
          }
        }
        dq_keys[g] = first < end ? Span{first * kPanel, std::min(nk, end * kPanel)} : Span{};
      }
    }

    for (int hg = 0; hg < group; ++hg) {
      const int h = kv_head * group + hg;
      if (mask != TileMask::skip) {
        const int64_t slot = ((b * p.Hkv + kv_head - args.first_group) * group + hg) * q_tiles + q_tile;
        const float* q_tile_packed = args.packed_q + slot * args.tile_floats;    // [D group][i][kRows]
        const float* do_tile_packed = args.packed_do + slot * args.tile_floats;  // [D group][i][kRows]
        const float* lse = args.lse + (static_cast<int64_t>(b) * p.H + h) * p.Cq + q_lo;
        const float* delta = args.delta + (static_cast<int64_t>(b) * p.H + h) * p.Cq + q_lo;
        for (int i = 0; i < mq; ++i) {
          s.lse2[i] = lse[i] == -kInf ? kInf : lse[i] * kLog2e;
          s.delta[i] = delta[i];
        }
        // S = Q Kᵀ (log2 units) and dP = dO Vᵀ, (rows × kPanel) per key panel
        for (int panel = 0; panel < panels_k; ++panel) {
          const Span range = rows[panel];
          if (range.end <= range.begin) continue;
          panel_gemm<Layout::grouped, Store::overwrite>(
              range.end - range.begin, D, q_tile_packed + range.begin * kRows, kBwdQueries * kRows, kRows * kRows,
              s.kt + panel * D * kPanel, s.sp + (panel * kBwdQueries + range.begin) * kPanel);
          panel_gemm<Layout::grouped, Store::overwrite>(
              range.end - range.begin, D, do_tile_packed + range.begin * kRows, kBwdQueries * kRows, kRows * kRows,
              s.vt + panel * D * kPanel, s.dpp + (panel * kBwdQueries + range.begin) * kPanel);
        }
        for (int panel = 0; panel < panels_k; ++panel) {
          const Span range = rows[panel];
          if (range.end <= range.begin) continue;
          if (range.masked) {
            probabilities_and_ds<true>(s, panel, range, q_first - k_first, nk, p.window, has_docs);
          } else {
            probabilities_and_ds<false>(s, panel, range, 0, nk, 0, false);
          }
        }
        // dVᵀ (D × kPanel) += dOᵀ (D × rows) · P_panel (rows × kPanel);  dKᵀ += Qᵀ · dS_panel
        for (int panel = 0; panel < panels_k; ++panel) {
          const Span range = rows[panel];
          if (range.end <= range.begin) continue;
          panel_gemm<Layout::packed, Store::accumulate>(D, range.end - range.begin, do_tile_packed + range.begin * kRows,
                                                        0, kBwdQueries * kRows,
                                                        s.sp + (panel * kBwdQueries + range.begin) * kPanel,
                                                        s.dvt + panel * D * kPanel);
          panel_gemm<Layout::packed, Store::accumulate>(D, range.end - range.begin, q_tile_packed + range.begin * kRows,
                                                        0, kBwdQueries * kRows,
                                                        s.dpp + (panel * kBwdQueries + range.begin) * kPanel,
                                                        s.dkt + panel * D * kPanel);
        }
        // dQ tile (mq × kPanel per D panel) = dS (mq × nk) · (scale K) (nk × kPanel), each row group over
        // the keys it may see (none: zero)
        for (int g = 0; g * kRows < mq; ++g) {
          const Span keys = dq_keys[g];
          for (int dp = 0; dp < d_panels; ++dp)
            panel_gemm<Layout::rows, Store::overwrite>(std::min(kRows, mq - g * kRows), keys.end - keys.begin,
                                                       s.ds + g * kRows * kBwdKeys + keys.begin, kBwdKeys, 0,
                                                       s.kp + (dp * kBwdKeys + keys.begin) * kPanel,
                                                       s.dq + (dp * kBwdQueries + g * kRows) * kPanel);
        }
      }
      std::atomic<int32_t>& counter = args.counters[(static_cast<int64_t>(b) * p.H + h) * q_tiles + q_tile];
      wait_for_turn(counter, turn);
      if (mask != TileMask::skip) {
        const int full_panels = D / kPanel;
        for (int i = 0; i < mq; ++i) {
          float* dq_row = args.dq + ((b * p.Cq + q_lo + i) * p.H + h) * D;
          if (i + kPrefetchRows < mq) prefetch_row(dq_row + kPrefetchRows * p.H * D, D);
          for (int dp = 0; dp < full_panels; ++dp) {
            const float* src = s.dq + (dp * kBwdQueries + i) * kPanel;
            float* dst = dq_row + dp * kPanel;
            vstore(dst, vadd(vload(dst), vload(src)));
            vstore(dst + kLanes, vadd(vload(dst + kLanes), vload(src + kLanes)));
          }
          for (int d = full_panels * kPanel; d < D; ++d)
            dq_row[d] += s.dq[(full_panels * kBwdQueries + i) * kPanel + d % kPanel];
        }
      }
      counter.store(turn + 1, std::memory_order_release);
    }
  }

  if (!packed) return;  // no pair of this task was visible
  for (int j = 0; j < nk; ++j) {
    const int64_t row = (b * p.Ck + kv_lo + j) * p.Hkv + kv_head;
    float* dk_row = args.dk + row * D;
    float* dv_row = args.dv + row * D;
    if (j + kPrefetchRows < nk) {
      prefetch_row(dk_row + kPrefetchRows * p.Hkv * D, D);
      prefetch_row(dv_row + kPrefetchRows * p.Hkv * D, D);
    }
    column_to_row<true>(dk_row, s.dkt + (j / kPanel) * D * kPanel + j % kPanel, D, scale);
    column_to_row<true>(dv_row, s.dvt + (j / kPanel) * D * kPanel + j % kPanel, D, 1.0f);
  }
}

// Work shared by every thread of a team: task indices handed out in increasing order.
template <typename Task>
void run_tasks(int64_t tasks, float* scratch, size_t scratch_floats_per_thread, const Task& task) {
  std::atomic<int64_t> next{0};
#pragma omp parallel if (tasks > 1)
  {
    float* mine = scratch + static_cast<size_t>(omp_get_thread_num()) * scratch_floats_per_thread;
    for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < tasks;
         t = next.fetch_add(1, std::memory_order_relaxed))
      task(t, mine);
  }
}

size_t round_up16(size_t n) { return (n + 15) / 16 * 16; }

std::string shape_text(const AttentionChunkParams& p) {
  return "B=" + std::to_string(p.B) + " Cq=" + std::to_string(p.Cq) + " Ck=" + std::to_string(p.Ck) +
         " H=" + std::to_string(p.H) + " Hkv=" + std::to_string(p.Hkv) + " D=" + std::to_string(p.D);
}

}  // namespace

// =============================================================================================

void CpuBackend::validate(const AttentionChunkParams& p) {
  const std::string shape = " (" + shape_text(p) + ")";
  FPDT_CHECK(p.B >= 0 && p.Cq >= 0 && p.Ck >= 0, "attention", "negative batch or token count" + shape,
             "check the chunk plan");
  FPDT_CHECK(p.H > 0 && p.Hkv > 0 && p.H % p.Hkv == 0, "attention",
             "q heads must be a positive multiple of kv heads" + shape, "check num_key_value_heads");
  FPDT_CHECK(p.D >= kMinHeadDim && p.D <= kMaxHeadDim, "attention",
             "head dim " + std::to_string(p.D) + " is outside the supported " + std::to_string(kMinHeadDim) + ".." +
                 std::to_string(kMaxHeadDim),
             "use a head dim of at most " + std::to_string(kMaxHeadDim));
  // (the packing gathers a panel's rows by 32-bit offsets, up to (kPanel − 1)·H·D floats)
  FPDT_CHECK(static_cast<int64_t>(p.H) * p.D < (int64_t{1} << 25), "attention",
             "q heads × head dim of 2^25 or more" + shape, "use fewer q heads per rank");
  FPDT_CHECK(std::isfinite(p.scale), "attention", "softmax scale is not finite", "use 1/sqrt(head dim)");
  FPDT_CHECK(p.window >= 0, "attention", "negative sliding window " + std::to_string(p.window),
             "use 0 for no window, or the window in tokens");
  FPDT_CHECK((p.q_doc_ids == nullptr) == (p.kv_doc_ids == nullptr), "attention",
             "document ids given for only one side of the block", "pass both q_doc_ids and kv_doc_ids, or neither");
  const bool empty = p.B == 0 || p.Cq == 0;
  FPDT_CHECK(empty || (p.q != nullptr && (p.Ck == 0 || (p.k != nullptr && p.v != nullptr))), "attention",
             "null q, k or v" + shape, "");
  FPDT_CHECK(p.Cq < (int64_t{1} << 31) && p.Ck < (int64_t{1} << 31), "attention",
             "a block of 2^31 tokens or more" + shape, "use smaller chunks");
}

int64_t CpuBackend::set_pack_budget_floats(int64_t floats) {
  return pack_budget_floats.exchange(std::max<int64_t>(floats, 0));
}

void CpuBackend::attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& p, bool accumulate) {
  validate(p);
  if (p.B == 0 || p.Cq == 0) return;
  FPDT_CHECK(out != nullptr && lse != nullptr, "attention", "null out or lse", "");
  if (!block_has_visible_pair(p.q_begin, p.Cq, p.kv_begin, p.Ck, p.window)) {  // the empty softmax: a no-op merge, or out = 0, lse = −inf
    if (!accumulate) {
      std::fill(out, out + static_cast<size_t>(p.B) * p.Cq * p.H * p.D, 0.0f);
      std::fill(lse, lse + static_cast<size_t>(p.B) * p.H * p.Cq, -kInf);
    }
    return;
  }
  // K and V are packed per (b, kv head) group into contiguous tiles first: read in place, their rows
  // are H·D floats apart, one or two per 4 KiB page, and a task's streaming over them stalls on TLB
  // and cache misses (measured: 15 % of the forward at D = 64). Groups go in batches whose packed
  // copy fits the pack budget, so this scratch is O(Ck·D), whatever H.
  const int D = p.D;
  const int group_heads = p.H / p.Hkv;
  const int64_t q_tiles = ceil_div(p.Cq, kFwdQueries);
  const int64_t kv_tiles = ceil_div(p.Ck, kFwdKeys);
  const int64_t k_floats = kv_tiles * kFwdKeys * D;                      // per group
  const int64_t v_floats = kv_tiles * row_groups(D) * kFwdKeys * kRows;  // per group
  const int64_t groups = static_cast<int64_t>(p.B) * p.Hkv;
  const int64_t batch = std::clamp<int64_t>(pack_budget_floats.load() / (k_floats + v_floats), 1, groups);
  const size_t per_thread = round_up16(ForwardScratch::floats(D));
  const int threads = omp_get_max_threads();
  float* scratch = kernel_workspace().floats(per_thread * threads + batch * (k_floats + v_floats));
  float* packed_k = scratch + per_thread * threads;  // [group in batch][kv tile][key group][D][kRows]
  float* packed_v = packed_k + batch * k_floats;     // [group in batch][kv tile][D group][kFwdKeys][kRows]
  for (int64_t first = 0; first < groups; first += batch) {
    const int64_t count = std::min(batch, groups - first);
    run_tasks(count * kv_tiles, scratch, per_thread, [&](int64_t t, float*) {
      const int64_t g = first + t / kv_tiles, tile = t % kv_tiles;
      const int64_t b = g / p.Hkv, kv_head = g % p.Hkv;
      const int64_t kv_lo = tile * kFwdKeys;
      const int nk = static_cast<int>(std::min<int64_t>(kFwdKeys, p.Ck - kv_lo));
      const int64_t k_row_stride = static_cast<int64_t>(p.Hkv) * D;
      const float* k_rows = p.k + ((b * p.Ck + kv_lo) * p.Hkv + kv_head) * D;
      const float* v_rows = p.v + ((b * p.Ck + kv_lo) * p.Hkv + kv_head) * D;
      float* k_dst = packed_k + (g - first) * k_floats + kv_lo * D;
      float* v_dst = packed_v + (g - first) * v_floats + tile * row_groups(D) * kFwdKeys * kRows;
      for (int j = 0; j < nk; ++j) {
        const float* k_row = k_rows + j * k_row_stride;
        float* k_column = k_dst + (j / kRows) * D * kRows + j % kRows;
        for (int d = 0; d < D; ++d) k_column[d * kRows] = k_row[d];
        if (j + kPrefetchRows < nk) {
          prefetch_row(k_row + kPrefetchRows * k_row_stride, D);
          prefetch_row(v_rows + (j + kPrefetchRows) * k_row_stride, D);
        }
        pack_row_by_groups(v_dst + j * kRows, kFwdKeys * kRows, v_rows + j * k_row_stride, D);
      }
    });
    // Task t: q tile from the last (the most kv tiles under a causal mask) to the first, then the
    // q heads of the batch, those sharing a kv head next to each other.
    const int64_t heads = count * group_heads;
    run_tasks(q_tiles * heads, scratch, per_thread, [&](int64_t t, float* mine) {
      ForwardScratch s(mine, D);
      const int64_t q_tile = q_tiles - 1 - t / heads;
      const int64_t g = first + (t % heads) / group_heads;
      const int b = static_cast<int>(g / p.Hkv);
      const int h = static_cast<int>(g % p.Hkv) * group_heads + static_cast<int>(t % group_heads);
      forward_task(out, lse, p, accumulate, b, h, q_tile * kFwdQueries, packed_k + (g - first) * k_floats,
                   packed_v + (g - first) * v_floats, s);
    });
  }
}

void CpuBackend::attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H,
                                       int D) {
  const int64_t rows = static_cast<int64_t>(B) * Cq * H;
#pragma omp parallel for schedule(static) if (rows * D >= (int64_t{1} << 15))
  for (int64_t row = 0; row < rows; ++row) {  // row = (b·Cq + i)·H + h
    const float* dout_row = dout + row * D;
    const float* out_row = out + row * D;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)  // in vectors of doubles (one chain of dependent adds was latency-bound)
    for (int d = 0; d < D; ++d) sum += static_cast<double>(dout_row[d]) * out_row[d];
    const int64_t h = row % H, i = (row / H) % Cq, b = row / (H * Cq);
    delta[(b * H + h) * Cq + i] = static_cast<float>(sum);
  }
}

void CpuBackend::attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                          const float* delta, const AttentionChunkParams& p) {
  validate(p);
  if (p.B == 0 || !block_has_visible_pair(p.q_begin, p.Cq, p.kv_begin, p.Ck, p.window)) return;
  FPDT_CHECK(dq && dk && dv && dout && lse && delta, "attention", "null gradient, dout, lse or delta", "");
  // Q and dO are packed per (b, kv head) group first (their rows are H·D floats apart in place; see
  // the forward), by q tiles in the [D group][i][kRows] layout both of their products read. Groups
  // go in batches whose packed copy fits the pack budget: O(Cq·D·H/Hkv) scratch, whatever H.
  const int D = p.D;
  const int group_heads = p.H / p.Hkv;
  const int64_t q_tiles = ceil_div(p.Cq, kBwdQueries);
  const int64_t kv_tiles = ceil_div(p.Ck, kBwdKeys);
  const int64_t groups = static_cast<int64_t>(p.B) * p.Hkv;  // (b, kv head) pairs
  const int64_t tile_floats = static_cast<int64_t>(row_groups(D)) * kBwdQueries * kRows;
  const int64_t group_floats = 2 * group_heads * q_tiles * tile_floats;
  const int64_t batch = std::clamp<int64_t>(pack_budget_floats.load() / group_floats, 1, groups);
  thread_local Counters counters;
  const size_t per_thread = round_up16(BackwardScratch::floats(D));
  const int threads = omp_get_max_threads();
  float* scratch = kernel_workspace().floats(per_thread * threads + batch * group_floats);
  float* packed_q = scratch + per_thread * threads;
  float* packed_do = packed_q + batch * group_floats / 2;
  BackwardArgs args{dq,       dk,        dv, dout,
                    lse,      delta,     &p, counters.zeroed(static_cast<size_t>(p.B) * p.H * q_tiles),
                    packed_q, packed_do, 0,  tile_floats};
  for (int64_t first = 0; first < groups; first += batch) {
    const int64_t count = std::min(batch, groups - first);
    const int64_t head_tiles = count * group_heads * q_tiles;
    run_tasks(head_tiles, scratch, per_thread, [&](int64_t t, float*) {
      const int64_t q_tile = t % q_tiles, slot = t / q_tiles;  // slot = (group − first)·group_heads + hg
      const int64_t g = first + slot / group_heads;
      const int64_t h = (g % p.Hkv) * group_heads + slot % group_heads, b = g / p.Hkv;
      const int64_t q_lo = q_tile * kBwdQueries;
      const int mq = static_cast<int>(std::min<int64_t>(kBwdQueries, p.Cq - q_lo));
      const int64_t row_stride = static_cast<int64_t>(p.H) * D;
      const float* q_rows = p.q + ((b * p.Cq + q_lo) * p.H + h) * D;
      const float* do_rows = dout + ((b * p.Cq + q_lo) * p.H + h) * D;
      for (int i = 0; i < mq; ++i) {
        if (i + kPrefetchRows < mq) {
          prefetch_row(q_rows + (i + kPrefetchRows) * row_stride, D);
          prefetch_row(do_rows + (i + kPrefetchRows) * row_stride, D);
        }
        pack_row_by_groups(packed_q + t * tile_floats + i * kRows, kBwdQueries * kRows, q_rows + i * row_stride, D);
        pack_row_by_groups(packed_do + t * tile_floats + i * kRows, kBwdQueries * kRows, do_rows + i * row_stride, D);
      }
    });
    args.first_group = first;
    // Task t: kv tile t / count (the first tiles have the most q tiles under a causal mask), then the
    // group. A task waits only on the same group's lower kv tiles, handed out earlier.
    run_tasks(kv_tiles * count, scratch, per_thread, [&](int64_t t, float* mine) {
      BackwardScratch s(mine, D);
      const int64_t g = first + t % count;
      backward_task(args, static_cast<int>(g / p.Hkv), static_cast<int>(g % p.Hkv), t / count, s);
    });
  }
}

void CpuBackend::attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const int32_t* doc_ids, int B, int64_t S, int Hq, int Hkv, int D, double scale,
                                   int64_t window) {
  attention_chunk_forward(out, lse, whole_sequence_block(q, k, v, doc_ids, B, S, Hq, Hkv, D, scale, window),
                          /*accumulate=*/false);
}

void CpuBackend::attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                    const float* v, const float* out, const float* lse, const int32_t* doc_ids, int B,
                                    int64_t S, int Hq, int Hkv, int D, double scale, int64_t window) {
  const AttentionChunkParams p = whole_sequence_block(q, k, v, doc_ids, B, S, Hq, Hkv, D, scale, window);
  validate(p);
  const size_t q_elements = static_cast<size_t>(B) * S * Hq * D;
  const size_t kv_elements = static_cast<size_t>(B) * S * Hkv * D;
  std::fill(dq, dq + q_elements, 0.0f);
  std::fill(dk, dk + kv_elements, 0.0f);
  std::fill(dv, dv + kv_elements, 0.0f);
  thread_local Workspace delta_workspace;  // separate from the kernels' scratch, which is live below
  float* delta = delta_workspace.floats(static_cast<size_t>(B) * Hq * S);
  attention_chunk_delta(delta, dout, out, B, S, Hq, D);
  attention_chunk_backward(dq, dk, dv, dout, lse, delta, p);
}

}  // namespace fpdt::kernels::cpu

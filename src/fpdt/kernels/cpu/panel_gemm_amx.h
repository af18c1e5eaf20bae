// The bf16 panel products of the CPU attention on AMX-BF16 tiles: C (M × kPanel) op= A (M × K) · B (K ×
// kPanel) as panel_gemm_bf16.h's, by tdpbf16ps (a 16 × 32 bf16 A tile times a 32 × 16 one into a 16 × 16
// fp32 C tile: exact products, fp32 sums — the spec's within fp32 reordering). Also the CPU's AMX check
// and the tile configuration every AMX user here shares (the bf16 peak in train/metrics.cpp). Compiled
// for AMX by target attributes, called only after amx_tiles_available() (the configuration: after
// amx_tiles_supported()).
#pragma once

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "fpdt/kernels/cpu/blas_core.h"
#include "fpdt/kernels/cpu/panel_gemm.h"

// The attention's AMX products need the AVX-512 build's panels (kPanel = 32: two 16-column tiles); the
// tile configuration and the CPU's check are there for any x86-64 build (the bf16 peak uses them).
#if defined(__x86_64__) && defined(__AVX512F__)
#define FPDT_AMX_TILES 1
#else
#define FPDT_AMX_TILES 0
#endif

namespace fpdt::kernels::cpu {

// Whether this CPU has AMX-TILE and AMX-BF16 and Linux grants the process the tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM for XTILEDATA, asked once: Linux ≥ 5.16 refuses tile instructions before it).
inline bool amx_tiles_supported() {
#if defined(__x86_64__)
  static const bool supported = [] {
    if (!cpu_has_amx_bf16()) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return supported;
#else
  return false;
#endif
}
// Whether the attention's AMX products run here: this build has them and the CPU supports them.
inline bool amx_tiles_available() { return FPDT_AMX_TILES && amx_tiles_supported(); }

// Tile rows and words: 16 rows of a tile, 16 words (32 bf16) along K a step.
constexpr int kAmxRows = 16;
constexpr int kAmxWords = 16;
inline int amx_round(int n) { return (n + 15) / 16 * 16; }  // up to whole tile rows or K steps

#if defined(__x86_64__)
// Palette 1 with all eight tiles 16 rows × 64 bytes (16 fp32 or 32 bf16 a row), for the calling thread;
// it holds until amx_release_tiles() (or another configuration). Only after amx_tiles_supported().
__attribute__((target("amx-tile"))) inline void amx_configure_tiles() {
  struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t bytes_per_row[16] = {};
    uint8_t rows[16] = {};
  } config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}
__attribute__((target("amx-tile"))) inline void amx_release_tiles() { _tile_release(); }
#endif

#if FPDT_AMX_TILES
// kBlocks (1 or 2) tiles of 16 rows of C (from c, kPanel floats a row) op= the same rows of A (from a,
// a_stride words a row) · B, over `steps` K steps: C tiles 0 1 (/ 2 3) += A 4 (/ 5) · B 6 7.
template <Store kStore, int kBlocks>
__attribute__((target("amx-tile,amx-bf16"))) inline void amx_row_tiles(int steps, const uint32_t* a, int64_t a_stride,
                                                                       const uint32_t* b, float* c) {
  const int64_t a_bytes = a_stride * 4, b_bytes = kPanel * 4, c_bytes = kPanel * 4;
  float* c1 = c + kAmxRows * kPanel;
  const uint32_t* a1 = a + kAmxRows * a_stride;
  if constexpr (kStore == Store::overwrite) {
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (kBlocks == 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
  } else {
    _tile_loadd(0, c, c_bytes);
    _tile_loadd(1, c + 16, c_bytes);
    if constexpr (kBlocks == 2) {
      _tile_loadd(2, c1, c_bytes);
      _tile_loadd(3, c1 + 16, c_bytes);
    }
  }
  for (int step = 0; step < steps; ++step) {
    const uint32_t* bk = b + step * kAmxWords * kPanel;
    _tile_loadd(4, a + step * kAmxWords, a_bytes);
    _tile_loadd(6, bk, b_bytes);
    _tile_loadd(7, bk + 16, b_bytes);
    if constexpr (kBlocks == 2) _tile_loadd(5, a1 + step * kAmxWords, a_bytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kBlocks == 2) {
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, c_bytes);
  _tile_stored(1, c + 16, c_bytes);
  if constexpr (kBlocks == 2) {
    _tile_stored(2, c1, c_bytes);
    _tile_stored(3, c1 + 16, c_bytes);
  }
}

// C (M × kPanel) op= A (M × 2·K2) · B (2·K2 × kPanel) with A and B as bf16 pairs (one 32-bit word per two
// values along K, the even one low): A's row m the K2 words a[m·a_stride ..], B's pair row k2 the kPanel
// words b[k2·kPanel ..] (panel_gemm_bf16.h's layout: two 16-column tiles 64 bytes apart), C's row m the
// kPanel floats c[m·kPanel ..]. Whole tiles only: rows are computed up to M rounded up to 16 (C's rows past
// M are written, A's read), and K2 up to a multiple of 16 words (A's words past K2 are read and must hold
// finite values, B's pair rows past K2 must be zero). The tiles must be configured (amx_configure_tiles).
// Store::rescale scales C's columns by col_scale (kPanel) first.
template <Store kStore>
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void amx_panel_gemm(int M, int K2, const uint32_t* a,
                                                                          int64_t a_stride, const uint32_t* b, float* c,
                                                                          const float* col_scale = nullptr) {
  const int rows = amx_round(M), steps = amx_round(K2) / kAmxWords;
  if constexpr (kStore == Store::rescale) {  // (a scale of all ones, the usual case, leaves C as it is)
    const __m512 s0 = _mm512_loadu_ps(col_scale), s1 = _mm512_loadu_ps(col_scale + 16), one = _mm512_set1_ps(1.0f);
    const bool ones = (_mm512_cmpeq_ps_mask(s0, one) & _mm512_cmpeq_ps_mask(s1, one)) == 0xffff;
    for (int m = 0; m < (ones ? 0 : rows); ++m) {
      _mm512_storeu_ps(c + m * kPanel, _mm512_mul_ps(_mm512_loadu_ps(c + m * kPanel), s0));
      _mm512_storeu_ps(c + m * kPanel + 16, _mm512_mul_ps(_mm512_loadu_ps(c + m * kPanel + 16), s1));
    }
  }
  constexpr Store kTileStore = kStore == Store::overwrite ? Store::overwrite : Store::accumulate;
  int m0 = 0;
  for (; m0 + 2 * kAmxRows <= rows; m0 += 2 * kAmxRows)
    amx_row_tiles<kTileStore, 2>(steps, a + m0 * a_stride, a_stride, b, c + m0 * kPanel);
  if (m0 < rows) amx_row_tiles<kTileStore, 1>(steps, a + m0 * a_stride, a_stride, b, c + m0 * kPanel);
}
#endif

// The tiles configured for the calling thread while in scope, when `used` (a task's worth of products).
class AmxTilesScope {
 public:
  explicit AmxTilesScope(bool used) : used_(used) {
#if FPDT_AMX_TILES
    if (used_) amx_configure_tiles();  // (used only where amx_tiles_available())
#endif
  }
  ~AmxTilesScope() {
#if FPDT_AMX_TILES
    if (used_) amx_release_tiles();
#endif
  }
  AmxTilesScope(const AmxTilesScope&) = delete;
  AmxTilesScope& operator=(const AmxTilesScope&) = delete;

 private:
  bool used_;
};

}  // namespace fpdt::kernels::cpu

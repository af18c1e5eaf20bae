// The CPU flash attention backward's products on bf16 pairs (flash_attention_backward.cpp calls them
// where its fp32 products stand): Kᵀ, Vᵀ and K paired once per task, then per pair of tiles S and dP,
// dVᵀ and dKᵀ, and the dQ tile on AMX tiles or AVX512-BF16 dot products; sums in the fp32 path's order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "fpdt/kernels/cpu/flash_attention_backward.h"
#include "fpdt/kernels/cpu/flash_attention_mask.h"

namespace fpdt::kernels::cpu::flash {

// The task's Kᵀ and Vᵀ (s.kt, s.vt) and K (s.kp) as bf16 pairs in s.ktw, s.vtw, s.kpw; AMX: the pair rows
// past the data 0, to whole K steps.
inline void pair_task_keys(const TaskKeys& t, BackwardScratch& s) {
  for (int panel = 0; panel < t.panels_k; ++panel) {
    for (auto [words, floats] : {std::pair{s.ktw, s.kt}, std::pair{s.vtw, s.vt}}) {
      uint32_t* panel_words = words + panel * t.kt_words * kPanel;
      pair_panel_rows(panel_words, floats + panel * t.D * kPanel, t.D);
      std::fill(panel_words + t.D2 * kPanel, panel_words + t.kt_words * kPanel, 0u);
    }
  }
  for (int dp = 0; dp < t.d_panels; ++dp) {
    uint32_t* panel_words = s.kpw + dp * t.key_pairs * kPanel;
    pair_panel_rows(panel_words, s.kp + dp * kBwdKeys * kPanel, t.nk);
    std::fill(panel_words + pairs(t.nk) * kPanel, panel_words + t.key_pairs * kPanel, 0u);
  }
}

// A pair's packed Q or dO tile as words (flash_attention_pairs.h): by rows, then by columns — from
// amx_q_rows_words(D) words on in the AMX layouts, from tile_floats / 2 as the dot products' pairs.
inline const uint32_t* tile_words(const float* tile) { return reinterpret_cast<const uint32_t*>(tile); }

#if FPDT_AMX_TILES

// S and dP of key panel `panel` for the rows `range`, from a whole tile of 16 rows (the rows before
// range.begin are not read).
inline void scores_amx(const TaskKeys& t, BackwardScratch& s, const float* q_tile, const float* do_tile, int panel,
                       Span range) {
  const int begin = range.begin / kAmxRows * kAmxRows;
  for (const auto& [a, b, c] :
       {std::tuple{tile_words(q_tile), s.ktw, s.sp}, std::tuple{tile_words(do_tile), s.vtw, s.dpp}})
    amx_panel_gemm<Store::overwrite>(range.end - begin, t.D2_tiles, a + begin * t.D2_tiles, t.D2_tiles,
                                     b + panel * t.D2_tiles * kPanel, c + (panel * kBwdQueries + begin) * kPanel);
}

// dVᵀ += dOᵀ · P_panel, dKᵀ += Qᵀ · dS_panel; P's and dS's pair rows padded with zeros to whole K steps.
inline void dk_dv_amx(const TaskKeys& t, BackwardScratch& s, const float* q_tile, const float* do_tile, int panel,
                      Span range) {
  const int n = range.end - range.begin;
  for (const auto& [a, b, c] : {std::tuple{tile_words(do_tile) + amx_q_rows_words(t.D), s.pw, s.dvt},
                                std::tuple{tile_words(q_tile) + amx_q_rows_words(t.D), s.pw_ds, s.dkt}}) {
    std::fill(b + pairs(n) * kPanel, b + amx_round(pairs(n)) * kPanel, 0u);
    amx_panel_gemm<Store::accumulate>(t.D, pairs(n), a + range.begin / 2, kAmxTokenWords, b,
                                      c + panel * t.dt_rows * kPanel);
  }
}

// The dQ tile of mq rows, by whole tiles of 16 rows, over the key panels any of its rows sees, dS 0 where a
// row does not.
inline void dq_tile_amx(const TaskKeys& t, BackwardScratch& s, const Span* rows, int mq) {
  for (int i0 = 0; i0 < mq; i0 += kAmxRows) {
    int first = t.panels_k, end = 0;
    for (int panel = 0; panel < t.panels_k; ++panel)
      if (rows[panel].begin < i0 + kAmxRows && i0 < rows[panel].end) {
        first = std::min(first, panel);
        end = panel + 1;
      }
    for (int i = i0; i < i0 + kAmxRows; ++i)  // (the rows' words of the panels they see: probabilities_and_ds)
      for (int panel = first; panel < end; ++panel) {
        uint32_t* dst = s.dsw + i * t.key_pairs + panel * (kPanel / 2);
        if (i >= mq || i < rows[panel].begin || rows[panel].end <= i) std::fill(dst, dst + kPanel / 2, 0u);
      }
    const int key_words = first < end ? (end - first) * (kPanel / 2) : 0;
    for (int dp = 0; dp < t.d_panels; ++dp)
      amx_panel_gemm<Store::overwrite>(kAmxRows, key_words, s.dsw + i0 * t.key_pairs + first * (kPanel / 2),
                                       t.key_pairs, s.kpw + (dp * t.key_pairs + first * (kPanel / 2)) * kPanel,
                                       s.dq + (dp * kBwdQueries + i0) * kPanel);
  }
}
#endif

#if FPDT_BF16_DOT_PRODUCTS
// S and dP of key panel `panel` for the rows `range`.
inline void scores_dots(const TaskKeys& t, BackwardScratch& s, const float* q_tile, const float* do_tile, int panel,
                        Span range) {
  for (const auto& [a, b, c] :
       {std::tuple{tile_words(q_tile), s.ktw, s.sp}, std::tuple{tile_words(do_tile), s.vtw, s.dpp}})
    bf16_panel_gemm<Store::overwrite>(range.end - range.begin, t.D, a + range.begin * t.D2, t.D2, 1, kRows * t.D2,
                                      b + panel * t.D2 * kPanel, c + (panel * kBwdQueries + range.begin) * kPanel);
}

// dVᵀ += dOᵀ · P_panel, dKᵀ += Qᵀ · dS_panel (P and dS as s.pw and s.pw_ds); range.begin is a whole row
// group: even.
inline void dk_dv_dots(const TaskKeys& t, BackwardScratch& s, const float* q_tile, const float* do_tile,
                       int64_t tile_floats, int panel, Span range) {
  const int n = range.end - range.begin;
  for (const auto& [a, b, c] : {std::tuple{tile_words(do_tile) + tile_floats / 2, s.pw, s.dvt},
                                std::tuple{tile_words(q_tile) + tile_floats / 2, s.pw_ds, s.dkt}})
    bf16_panel_gemm<Store::accumulate>(t.D, n, a + (range.begin / 2) * kRows, 1, kRows, t.query_pairs * kRows, b,
                                       c + panel * t.dt_rows * kPanel);
}

// Row group g of the dQ tile over its keys (keys.begin is a whole panel: even; the group's rows of dS as
// pairs: probabilities_and_ds).
inline void dq_group_dots(const TaskKeys& t, BackwardScratch& s, int g, Span keys, int mq) {
  const int rows_in_group = std::min(kRows, mq - g * kRows);
  for (int dp = 0; dp < t.d_panels; ++dp)
    bf16_panel_gemm<Store::overwrite>(rows_in_group, keys.end - keys.begin,
                                      s.dsw + g * kRows * t.key_pairs + keys.begin / 2, t.key_pairs, 1, 0,
                                      s.kpw + (dp * t.key_pairs + keys.begin / 2) * kPanel,
                                      s.dq + (dp * kBwdQueries + g * kRows) * kPanel);
}
#endif

}  // namespace fpdt::kernels::cpu::flash

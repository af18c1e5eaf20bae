// The CPU flash attention backward's softmax step on one key panel of a pair (flash_attention_backward.cpp
// calls it between its products): P = 2^(S − lse) under the mask and dS = P ∘ (dP − Δ), overwriting S and
// dP (or written as bf16 pairs), row by row in vectors along the keys.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fpdt/kernels/cpu/flash_attention_backward.h"
#include "fpdt/kernels/cpu/flash_attention_mask.h"

namespace fpdt::kernels::cpu::flash {

// P and dS of one key panel of a pair from S and dP, for the rows [begin, end) of the q tile.
// Query i sees key j (of the kv tile) iff j <= q_rel + i (clamped; also < nk), j > q_rel + i − window
// (with a window), and docs match. kBf16: S is r(q)·r(k), scaled here by score_scale, and the P and dS
// the products read next are r(P) and r(dS) (dS itself from the unrounded P). With pairs (bf16 dot
// products, AMX: to_pairs) they go out as bf16 pairs instead of floats: P and dS by pairs of rows into s.pw and
// s.pw_ds ([query pair][kPanel] words from row `begin`, the row past an odd end 0), dS by pairs of keys
// into the rows' words of s.dsw.
template <bool kMasked, bool kBf16>
void probabilities_and_ds(BackwardScratch& s, int panel, Span rows, int64_t q_rel, int nk, int64_t window,
                          bool has_docs, float score_scale, bool to_pairs) {
  float* sp = s.sp + panel * kBwdQueries * kPanel;
  float* dpp = s.dpp + panel * kBwdQueries * kPanel;
  float* ds = s.ds + panel * kPanel;
  const VecI j0 = ilanes<Vec>(panel * kPanel), j1 = ilanes<Vec>(panel * kPanel + kLanes);
  VecI k_doc0 = iset<Vec>(0), k_doc1 = iset<Vec>(0);
  if (kMasked && has_docs) {
    k_doc0 = iload<Vec>(s.k_docs + panel * kPanel);
    k_doc1 = iload<Vec>(s.k_docs + panel * kPanel + kLanes);
  }
  const Vec scale = vset<Vec>(score_scale);
  struct Row {
    Vec p0, p1, ds0, ds1;
  };
  auto row = [&](int i) -> Row {
    const Vec lse2 = vbroadcast<Vec>(s.lse2 + i);
    const Vec delta = vbroadcast<Vec>(s.delta + i);
    Vec p0, p1;
    if constexpr (kBf16) {
      p0 = vexp2(vfma(vload<Vec>(sp + i * kPanel), scale, vsub(vset<Vec>(0.0f), lse2)));
      p1 = vexp2(vfma(vload<Vec>(sp + i * kPanel + kLanes), scale, vsub(vset<Vec>(0.0f), lse2)));
    } else {
      p0 = vexp2(vsub(vload<Vec>(sp + i * kPanel), lse2));
      p1 = vexp2(vsub(vload<Vec>(sp + i * kPanel + kLanes), lse2));
    }
    if constexpr (kMasked) {
      // visible iff j < limit, limit = min(q_rel + i, nk − 1) + 1
      const VecI limit = iset<Vec>(clamp_to_int(std::min<int64_t>(q_rel + i, nk - 1) + 1, 0, kBwdKeys));
      Mask vis0 = greater(limit, j0), vis1 = greater(limit, j1);
      if (window > 0) {  // visible iff j > before, before = q_rel + i − window (clamped)
        const VecI before = iset<Vec>(clamp_to_int(q_rel + i - window, -1, kBwdKeys));
        keep(vis0, vis1, greater(j0, before), greater(j1, before));
      }
      if (has_docs) {
        const VecI q_doc = iset<Vec>(s.q_docs[i]);
        keep(vis0, vis1, equal(k_doc0, q_doc), equal(k_doc1, q_doc));
      }
      p0 = zero_unless(vis0, p0);
      p1 = zero_unless(vis1, p1);
    }
    Vec ds0 = vmul(p0, vsub(vload<Vec>(dpp + i * kPanel), delta));
    Vec ds1 = vmul(p1, vsub(vload<Vec>(dpp + i * kPanel + kLanes), delta));
    return {p0, p1, ds0, ds1};  // unrounded
  };
  if (kBf16 && to_pairs) {
    const Vec zero = vset<Vec>(0.0f);
    for (int i = rows.begin; i < rows.end; i += 2) {
      const Row even = row(i), odd = i + 1 < rows.end ? row(i + 1) : Row{zero, zero, zero, zero};
      const int pair_row_index = (i - rows.begin) / 2;
      const bool ftz = s.computed_under_ftz;
      const Bf16Row even_ds = round_row(even.ds0, even.ds1, ftz), odd_ds = round_row(odd.ds0, odd.ds1, ftz);
      store_pair_row(s.pw + pair_row_index * kPanel, round_row(even.p0, even.p1, ftz),
                     round_row(odd.p0, odd.p1, ftz));
      store_pair_row(s.pw_ds + pair_row_index * kPanel, even_ds, odd_ds);
      store_pairs_along(s.dsw + i * pairs(kBwdKeys) + panel * (kPanel / 2), even_ds);
      if (i + 1 < rows.end) store_pairs_along(s.dsw + (i + 1) * pairs(kBwdKeys) + panel * (kPanel / 2), odd_ds);
    }
    return;
  }
  for (int i = rows.begin; i < rows.end; ++i) {
    auto [p0, p1, ds0, ds1] = row(i);
    if constexpr (kBf16) {
      p0 = vround_bf16(p0);
      p1 = vround_bf16(p1);
      ds0 = vround_bf16(ds0);
      ds1 = vround_bf16(ds1);
    }
    vstore(sp + i * kPanel, p0);
    vstore(sp + i * kPanel + kLanes, p1);
    vstore(dpp + i * kPanel, ds0);
    vstore(dpp + i * kPanel + kLanes, ds1);
    vstore(ds + i * kBwdKeys, ds0);
    vstore(ds + i * kBwdKeys + kLanes, ds1);
  }
}

}  // namespace fpdt::kernels::cpu::flash

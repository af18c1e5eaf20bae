// The CPU flash attention's forward (the design: flash_attention.h): one task per (b, q head, 192
// queries) runs the online softmax over the 96-key tiles its queries may see, on the K and V of its
// (b, kv head) group packed once per call. out and lse are overwritten (=), or merged into by
// log-sum-exp with accumulate. bf16 (flash_attention.h): the rounded operands of the spec, the scale
// applied to the scores, the running max an integer in log2 units.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "fpdt/kernels/cpu/flash_attention.h"
#include "fpdt/kernels/cpu/flash_attention_mask.h"
#include "fpdt/kernels/cpu/flash_attention_pairs.h"

namespace fpdt::kernels::cpu::flash {

namespace {

struct ForwardScratch {
  float* qt;        // [panel][D][kPanel] Qᵀ of the task's queries, times scale·log2 e (bf16: r(q)); zero past mq
  float* st;        // [panel][kFwdKeys][kPanel] Sᵀ, then Pᵀ, of one kv tile
  float* ot;        // [panel][amx_round(D)][kPanel] Oᵀ accumulator (unnormalised; rows past D for AMX's whole tiles)
  float* m;         // (kFwdQueries) running max, log2 units
  float* l;         // (kFwdQueries) running sum
  float* alpha;     // (kFwdQueries) rescale of this step
  float* m_init;    // (kFwdQueries) m at the start (accumulate mode)
  float* l_init;    // (kFwdQueries) l at the start (accumulate mode)
  int32_t* q_docs;  // (kFwdQueries)
  int32_t* k_docs;  // (kFwdKeys)
  uint32_t* qw;     // bf16 dot products, AMX: [panel][D pair][kPanel] Qᵀ as bf16 pairs (AMX: amx_round(⌈D/2⌉)
                    // pair rows, 0 past ⌈D/2⌉)
  uint32_t* pw;     // bf16 dot products: [key pair][kPanel] Pᵀ of one panel as bf16 pairs
  // The task's thread flushes subnormal results (panel_gemm_bf16.h): P̃ is rounded without the check.
  bool computed_under_ftz = flushes_subnormal_results();

  ForwardScratch(float* base, int D) { carve(Carver(base), D, this); }
  static size_t floats(int D) { return carve(Carver(nullptr), D, nullptr); }

 private:
  static size_t carve(Carver carve, int D, ForwardScratch* s) {
    const size_t panels_q = kFwdQueries / kPanel;
    float* qt = carve.take(panels_q * D * kPanel);
    float* st = carve.take(panels_q * kFwdKeys * kPanel);
    float* ot = carve.take(panels_q * amx_round(D) * kPanel);
    float* m = carve.take(kFwdQueries);
    float* l = carve.take(kFwdQueries);
    float* alpha = carve.take(kFwdQueries);
    float* m_init = carve.take(kFwdQueries);
    float* l_init = carve.take(kFwdQueries);
    int32_t* q_docs = carve.take_ints(kFwdQueries);
    int32_t* k_docs = carve.take_ints(kFwdKeys);
    auto* qw = reinterpret_cast<uint32_t*>(carve.take(panels_q * amx_round(pairs(D)) * kPanel));
    auto* pw = reinterpret_cast<uint32_t*>(carve.take(pairs(kFwdKeys) * kPanel));
    if (s) {
      *s = ForwardScratch{qt, st, ot, m, l, alpha, m_init, l_init, q_docs, k_docs};
      s->qw = qw;
      s->pw = pw;
    }
    return carve.used();
  }
  ForwardScratch(float* qt, float* st, float* ot, float* m, float* l, float* alpha, float* m_init, float* l_init,
                 int32_t* q_docs, int32_t* k_docs)
      : qt(qt), st(st), ot(ot), m(m), l(l), alpha(alpha), m_init(m_init), l_init(l_init), q_docs(q_docs),
        k_docs(k_docs), qw(nullptr), pw(nullptr) {}
};

// Online softmax of nk keys of a kv tile over one panel of kPanel queries. sp: the panel's Sᵀ rows
// (nk × kPanel), replaced by Pᵀ; k_first_rel: the first key's position minus the task's first query's;
// k_docs: (nk). Updates m, l and writes alpha for the queries at offset i0 of the task. kBf16: the
// scores are r(q)·r(k), scaled by score_scale inside the exponent's FMA (the scaled max is the max
// scaled: rounding is monotonic); the running max is lifted to an integer (the spec's power-of-two m*,
// so alpha is a power of two) and Pᵀ is r(P̃), while l sums the unrounded P̃; with pairs_out (bf16 dot
// products, AMX), r(P̃ᵀ) goes there as bf16 pairs instead ([key pair][kPanel] words, ⌈nk/2⌉ rows, the odd
// key past nk 0) and sp keeps the scores (the masked ones −inf).
template <bool kMasked, bool kBf16>
void softmax_panel(float* sp, int nk, int i0, ForwardScratch& s, int64_t k_first_rel, const int32_t* k_docs,
                   int64_t window, bool has_docs, float score_scale, uint32_t* pairs_out) {
  const Vec m_old0 = vload<Vec>(s.m + i0), m_old1 = vload<Vec>(s.m + i0 + kLanes);
  const Vec neg_inf = vset<Vec>(-kInf);
  // the max of this tile's scores as they are stored (bf16: unscaled), then with the running max
  Vec mx0 = kBf16 ? neg_inf : m_old0, mx1 = kBf16 ? neg_inf : m_old1;
  auto score = [&](int j, int half) { return vload<Vec>(sp + j * kPanel + half * kLanes); };
  if constexpr (kMasked) {
    // Query i (of the task) sees key j iff i >= k_first_rel + j (causal), i < k_first_rel + j + window
    // (with a window), and docs match.
    const VecI i_lane0 = ilanes<Vec>(i0), i_lane1 = ilanes<Vec>(i0 + kLanes);
    VecI q_doc0 = iset<Vec>(0), q_doc1 = iset<Vec>(0);
    if (has_docs) {
      q_doc0 = iload<Vec>(s.q_docs + i0);
      q_doc1 = iload<Vec>(s.q_docs + i0 + kLanes);
    }
    for (int j = 0; j < nk; ++j) {
      // visible iff i > first_visible − 1, with the threshold clamped into int32 range
      const VecI threshold = iset<Vec>(clamp_to_int(k_first_rel + j - 1, -1, kFwdQueries));
      Mask vis0 = greater(i_lane0, threshold), vis1 = greater(i_lane1, threshold);
      if (window > 0) {  // visible iff i < end, the end clamped into int32 range
        const VecI end = iset<Vec>(clamp_to_int(k_first_rel + j + window, -1, kFwdQueries + 1));
        keep(vis0, vis1, greater(end, i_lane0), greater(end, i_lane1));
      }
      if (has_docs) {
        const VecI k_doc = iset<Vec>(k_docs[j]);
        keep(vis0, vis1, equal(q_doc0, k_doc), equal(q_doc1, k_doc));
      }
      const Vec s0 = select(vis0, score(j, 0), neg_inf);
      const Vec s1 = select(vis1, score(j, 1), neg_inf);
      vstore(sp + j * kPanel, s0);
      vstore(sp + j * kPanel + kLanes, s1);
      mx0 = vmax(mx0, s0);
      mx1 = vmax(mx1, s1);
    }
  } else {
    for (int j = 0; j < nk; ++j) {
      mx0 = vmax(mx0, score(j, 0));
      mx1 = vmax(mx1, score(j, 1));
    }
  }
  const Vec scale = vset<Vec>(score_scale);
  if constexpr (kBf16) {
    mx0 = vceil(vmax(m_old0, vmul(mx0, scale)));
    mx1 = vceil(vmax(m_old1, vmul(mx1, scale)));
  }
  // A query that has seen nothing yet keeps m = −inf; subtract 0 instead so that 2^(−inf) = 0.
  const Vec use0 = select(equal(mx0, neg_inf), vset<Vec>(0.0f), mx0);
  const Vec use1 = select(equal(mx1, neg_inf), vset<Vec>(0.0f), mx1);
  const Vec alpha0 = vexp2(vsub(m_old0, use0));
  const Vec alpha1 = vexp2(vsub(m_old1, use1));
  const Vec minus_use0 = vsub(vset<Vec>(0.0f), use0), minus_use1 = vsub(vset<Vec>(0.0f), use1);
  Vec sum0 = vset<Vec>(0.0f), sum1 = vset<Vec>(0.0f);
  auto probability = [&](int j, int half) {  // P̃ of key j, unrounded; 0 past nk
    if (j >= nk) return vset<Vec>(0.0f);
    const Vec x = score(j, half);
    const Vec p = kBf16 ? vexp2(vfma(x, scale, half == 0 ? minus_use0 : minus_use1))
                        : vexp2(vsub(x, half == 0 ? use0 : use1));
    (half == 0 ? sum0 : sum1) = vadd(half == 0 ? sum0 : sum1, p);
    return p;
  };
  if (kBf16 && pairs_out) {
    for (int j = 0; j < nk; j += 2) {
      const Vec even0 = probability(j, 0), even1 = probability(j, 1);
      const Vec odd0 = probability(j + 1, 0), odd1 = probability(j + 1, 1);
      store_pair_row(pairs_out + (j / 2) * kPanel, round_row(even0, even1, s.computed_under_ftz),
                     round_row(odd0, odd1, s.computed_under_ftz));
    }
  } else {
    for (int j = 0; j < nk; ++j) {
      const Vec p0 = probability(j, 0), p1 = probability(j, 1);
      vstore(sp + j * kPanel, kBf16 ? vround_bf16(p0) : p0);
      vstore(sp + j * kPanel + kLanes, kBf16 ? vround_bf16(p1) : p1);
    }
  }
  vstore(s.m + i0, mx0);
  vstore(s.m + i0 + kLanes, mx1);
  vstore(s.alpha + i0, alpha0);
  vstore(s.alpha + i0 + kLanes, alpha1);
  vstore(s.l + i0, vfma(vload<Vec>(s.l + i0), alpha0, sum0));
  vstore(s.l + i0 + kLanes, vfma(vload<Vec>(s.l + i0 + kLanes), alpha1, sum1));
}

// What a forward task's steps read of its queries (b, q head h, queries [q_lo, q_lo + mq)) and of the call,
// fixed over its kv tiles.
struct TaskQueries {
  const AttentionChunkParams* p;
  int b, h;
  int64_t q_lo;
  int D, mq, panels_q;
  int64_t q_first, q_last;   // the queries' positions
  int64_t q_row_stride;      // H·D: their rows' distance in q and out
  float* out_rows;           // row i at + i·q_row_stride
  float* lse_row;            // (mq)
  bool has_docs;
  bool bf16, dots, amx;      // Precision::bf16; its products on bf16 dot products, on AMX tiles
  int D2, D2_tiles;          // pair rows of Qᵀ, AMX's padded to whole K steps
  int ot_rows, qw_rows;
  float qk_scale;            // scale·log2 e
  DocRange q_docs;
};

// Running state over panels_q·kPanel columns; columns past mq are padding that is never written out.
// Qᵀ is zero there, so those columns stay finite. A resumed row starts from m + log2 l = its lse
// (log2 units): l = 1 in fp32; in bf16 m is the integer above, and the Oᵀ below starts at out · l.
void start_queries(const TaskQueries& t, bool accumulate, ForwardScratch& s) {
  const AttentionChunkParams& p = *t.p;
  const int D = t.D;
  const float* q_rows = p.q + ((t.b * p.Cq + t.q_lo) * p.H + t.h) * D;  // row i at + i·q_row_stride
  for (int i = 0; i < t.panels_q * kPanel; ++i) {
    const bool resume = accumulate && i < t.mq && t.lse_row[i] > -kInf;
    const float lse2 = resume ? t.lse_row[i] * kLog2e : -kInf;
    s.m[i] = t.bf16 ? std::ceil(lse2) : lse2;
    s.l[i] = !resume ? 0.0f : t.bf16 ? std::exp2(lse2 - s.m[i]) : 1.0f;
    s.m_init[i] = s.m[i];
    s.l_init[i] = s.l[i];
  }
  for (int panel = 0; panel < t.panels_q; ++panel) {
    const int64_t i0 = static_cast<int64_t>(panel) * kPanel;
    const int count = static_cast<int>(std::min<int64_t>(kPanel, t.mq - i0));
    const int next = static_cast<int>(std::clamp<int64_t>(t.mq - i0 - kPanel, 0, kPanel));
    transpose_into_panel(s.qt + panel * D * kPanel, q_rows + i0 * t.q_row_stride, t.q_row_stride, count, next, D,
                         t.bf16 ? 1.0f : t.qk_scale, t.bf16);
    if (t.dots || t.amx) {
      uint32_t* qw = s.qw + panel * t.qw_rows * kPanel;
      pair_panel_rows(qw, s.qt + panel * D * kPanel, D);
      std::fill(qw + t.D2 * kPanel, qw + t.qw_rows * kPanel, 0u);
    }
    float* ot = s.ot + panel * t.ot_rows * kPanel;
    if (!accumulate) {
      std::fill(ot, ot + t.ot_rows * kPanel, 0.0f);
      continue;
    }
    transpose_into_panel(ot, t.out_rows + i0 * t.q_row_stride, t.q_row_stride, count, next, D, 1.0f);
    std::fill(ot + D * kPanel, ot + t.ot_rows * kPanel, 0.0f);
    for (int c = 0; c < count; ++c)  // a row that has seen nothing yet starts from 0, not from out
      if (s.m_init[i0 + c] == -kInf)
        for (int d = 0; d < D; ++d) ot[d * kPanel + c] = 0.0f;
    if (t.bf16) {  // out · l_init, in unnormalised units (l_init = 0 where the row has seen nothing)
      const Vec l0 = vload<Vec>(s.l_init + i0), l1 = vload<Vec>(s.l_init + i0 + kLanes);
      for (int d = 0; d < D; ++d) {
        vstore(ot + d * kPanel, vmul(vload<Vec>(ot + d * kPanel), l0));
        vstore(ot + d * kPanel + kLanes, vmul(vload<Vec>(ot + d * kPanel + kLanes), l1));
      }
    }
  }
}

// The task's queries over kv tile `tile` (k_head, v_head: as forward_task's): Sᵀ, the online softmax
// step and Oᵀ = α ∘ Oᵀ + Vᵀ · Pᵀ, panel by panel; nothing where no query may see the tile.
void forward_kv_tile(const TaskQueries& t, int64_t tile, const float* k_head, const float* v_head,
                     ForwardScratch& s) {
  const AttentionChunkParams& p = *t.p;
  const int D = t.D, D2 = t.D2, panels_q = t.panels_q, ot_rows = t.ot_rows;
  const bool bf16 = t.bf16, dots = t.dots, amx = t.amx, has_docs = t.has_docs;
  const float qk_scale = t.qk_scale;
  const int64_t q_first = t.q_first;
  const int32_t* row_kv_docs = has_docs ? p.kv_doc_ids + t.b * p.Ck : nullptr;  // (Ck) or null
  const int64_t kv_lo = tile * kFwdKeys;
  const TokenTile kv = token_tile(kv_lo, kFwdKeys, p.Ck, p.kv_begin, row_kv_docs, s.k_docs);
  const int nk = kv.count;
  const int64_t k_first = kv.first, k_last = kv.last;
  const DocRange k_docs = kv.docs;
  const TileMask mask = classify(q_first, t.q_last, k_first, k_last, p.window, has_docs, t.q_docs, k_docs);
  if (mask == TileMask::skip) return;
  // Per panel, the keys [begin, end) of the tile that some of its queries may see by position (begin
  // a whole key group), and whether they need the mask: on the diagonal a panel skips the keys after
  // its last query, so the tile is computed down to kPanel × kRows blocks, not whole.
  Span keys[kFwdPanels];
  for (int panel = 0; panel < panels_q; ++panel) {
    const int64_t panel_first = q_first + panel * kPanel, panel_last = std::min(panel_first + kPanel - 1, t.q_last);
    Span& range = keys[panel];
    range = keys_seen(panel_first, panel_last, k_first, nk, p.window);
    if (mask == TileMask::full || range.end <= range.begin) continue;
    const TileMask panel_mask = classify(panel_first, panel_last, k_first + range.begin, k_first + range.end - 1,
                                         p.window, has_docs, t.q_docs, k_docs);
    if (panel_mask == TileMask::skip) range = {};
    range.masked = panel_mask == TileMask::mask;
  }
  // Sᵀ (keys × kPanel per panel) = K_tile · Qᵀ_panel, in log2 units. Key groups outer: a group's K
  // rows stay in L1 while the Qᵀ panels stream past.
  const float* k_tile = k_head + kv_lo * D;  // [key group][D][kRows]
  [[maybe_unused]] const uint32_t* k_tile_pairs = reinterpret_cast<const uint32_t*>(k_head) + kv_lo * D2;  // [key group][D pair][kRows]
#if FPDT_AMX_TILES
  if (amx) {  // per panel, its keys from a whole tile of 16 rows (the rows before begin are not read)
    const uint32_t* k_tile_amx = reinterpret_cast<const uint32_t*>(k_head) + tile * amx_k_tile_words(D);
    for (int panel = 0; panel < panels_q; ++panel) {
      const int begin = keys[panel].begin / kAmxRows * kAmxRows;
      if (keys[panel].end <= keys[panel].begin) continue;
      amx_panel_gemm<Store::overwrite>(keys[panel].end - begin, t.D2_tiles, k_tile_amx + begin * t.D2_tiles, t.D2_tiles,
                                       s.qw + panel * t.D2_tiles * kPanel, s.st + (panel * kFwdKeys + begin) * kPanel);
    }
  }
#endif
  for (int j0 = 0; j0 < (amx ? 0 : nk); j0 += kRows)
    for (int panel = 0; panel < panels_q; ++panel) {
      if (keys[panel].begin > j0 || j0 >= keys[panel].end) continue;
      const int rows = std::min(kRows, keys[panel].end - j0);
      float* st = s.st + (panel * kFwdKeys + j0) * kPanel;
#if FPDT_BF16_DOT_PRODUCTS
      if (dots) {
        bf16_panel_gemm<Store::overwrite>(rows, D, k_tile_pairs + j0 * D2, 1, kRows, 0, s.qw + panel * D2 * kPanel, st);
        continue;
      }
#endif
      panel_gemm<Layout::packed, Store::overwrite>(rows, D, k_tile + j0 * D, 0, 0, s.qt + panel * D * kPanel, st);
    }
  const float* v_tile = v_head + tile * row_groups(D) * kFwdKeys * kRows;
  [[maybe_unused]] const uint32_t* v_tile_pairs = reinterpret_cast<const uint32_t*>(v_head) + tile * row_groups(D) * pairs(kFwdKeys) * kRows;
  for (int panel = 0; panel < panels_q; ++panel) {
    const Span range = keys[panel];
    if (range.end <= range.begin) continue;
    float* sp = s.st + (panel * kFwdKeys + range.begin) * kPanel;
    const int n = range.end - range.begin;
    const int64_t k_first_rel = k_first + range.begin - q_first;
    uint32_t* pairs_out = dots || amx ? s.pw : nullptr;  // Pᵀ as bf16 pairs, for the products that read them
    if (range.masked && bf16) {
      softmax_panel<true, true>(sp, n, panel * kPanel, s, k_first_rel, s.k_docs + range.begin, p.window,
                                has_docs, qk_scale, pairs_out);
    } else if (range.masked) {
      softmax_panel<true, false>(sp, n, panel * kPanel, s, k_first_rel, s.k_docs + range.begin, p.window,
                                 has_docs, 1.0f, nullptr);
    } else if (bf16) {
      softmax_panel<false, true>(sp, n, panel * kPanel, s, 0, nullptr, 0, false, qk_scale, pairs_out);
    } else {
      softmax_panel<false, false>(sp, n, panel * kPanel, s, 0, nullptr, 0, false, 1.0f, nullptr);
    }
    // Oᵀ_panel (D × kPanel) = α ∘ Oᵀ_panel + Vᵀ (D × n) · Pᵀ_panel (n × kPanel); range.begin is even
    float* ot = s.ot + panel * ot_rows * kPanel;
#if FPDT_AMX_TILES
    if (amx) {  // Pᵀ's pair rows padded with zeros to whole K steps
      const uint32_t* v_tile_amx = reinterpret_cast<const uint32_t*>(v_head) + tile * amx_v_tile_words(D);
      std::fill(s.pw + pairs(n) * kPanel, s.pw + amx_round(pairs(n)) * kPanel, 0u);
      amx_panel_gemm<Store::rescale>(D, pairs(n), v_tile_amx + range.begin / 2, kAmxTokenWords, s.pw, ot,
                                     s.alpha + panel * kPanel);
      continue;
    }
#endif
#if FPDT_BF16_DOT_PRODUCTS
    if (dots) {
      bf16_panel_gemm<Store::rescale>(D, n, v_tile_pairs + (range.begin / 2) * kRows, 1, kRows,
                                      pairs(kFwdKeys) * kRows, s.pw, ot,
                                      s.alpha + panel * kPanel);
      continue;
    }
#endif
    panel_gemm<Layout::packed, Store::rescale>(D, n, v_tile + range.begin * kRows, 0, kFwdKeys * kRows, sp, ot,
                                               s.alpha + panel * kPanel);
  }
}

// The task's rows of out (normalised) and lse from its running state; with accumulate, only the rows
// this block added to.
void finish_queries(const TaskQueries& t, bool accumulate, const ForwardScratch& s) {
  const int D = t.D, mq = t.mq;
  const int64_t q_row_stride = t.q_row_stride;
  float* out_rows = t.out_rows;
  float* lse_row = t.lse_row;
  const int ot_rows = t.ot_rows;
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
    if (accumulate && l == s.l_init[i] && s.m[i] == s.m_init[i]) continue;  // this block added nothing
    if (i + kPrefetchRows < mq) prefetch_row(out_row + kPrefetchRows * q_row_stride, D);
    column_to_row<false>(out_row, s.ot + (i / kPanel) * ot_rows * kPanel + i % kPanel, D, 1.0f / l);
    lse_row[i] = static_cast<float>((static_cast<double>(s.m[i]) + std::log2(static_cast<double>(l))) * kLn2);
  }
}

// One forward task: queries [q_lo, q_lo + mq) of head h in batch b, over every kv tile of the block.
// k_head: [kv tile][key group][D][kRows] the kv head's K; v_head: [kv tile][D group][kFwdKeys][kRows] its V
// (both packed once per call by attention_chunk_forward). With bf16 dot products the same buffers hold
// bf16 pairs: K as [kv tile][key group][D pair][kRows] words, V as [kv tile][D group][key pair][kRows];
// with AMX tiles pack_kv_amx's layouts (flash_attention_pairs.h).
void forward_task(float* out, float* lse, const AttentionChunkParams& p, bool accumulate, int b, int h, int64_t q_lo,
                  const float* k_head, const float* v_head, ForwardScratch& s) {
  TaskQueries t;
  t.p = &p;
  t.b = b;
  t.h = h;
  t.q_lo = q_lo;
  t.D = p.D;
  t.mq = static_cast<int>(std::min<int64_t>(kFwdQueries, p.Cq - q_lo));
  t.panels_q = (t.mq + kPanel - 1) / kPanel;
  t.q_first = p.q_begin + q_lo;
  t.q_last = t.q_first + t.mq - 1;
  t.q_row_stride = static_cast<int64_t>(p.H) * p.D;
  t.out_rows = out + ((b * p.Cq + q_lo) * p.H + h) * p.D;
  t.lse_row = lse + (static_cast<int64_t>(b) * p.H + h) * p.Cq + q_lo;
  t.has_docs = p.q_doc_ids != nullptr;
  t.bf16 = p.precision == Precision::bf16;
  t.dots = use_bf16_dot_products(p);
  t.amx = use_amx_tiles(p);
  t.D2 = pairs(p.D);
  t.D2_tiles = amx_round(t.D2);
  t.ot_rows = amx_round(p.D);
  t.qw_rows = t.amx ? t.D2_tiles : t.D2;
  t.qk_scale = static_cast<float>(p.scale) * kLog2e;
  start_queries(t, accumulate, s);
  if (t.has_docs) {
    const int32_t* docs = p.q_doc_ids + b * p.Cq + q_lo;
    for (int i = 0; i < kFwdQueries; ++i) s.q_docs[i] = docs[std::min(i, t.mq - 1)];
    t.q_docs = doc_range(docs, t.mq);
  }
  // kv tiles that some query of the task may see: causally, kv_begin + kv_lo <= q_last; with a window,
  // the tile's last key after q_first − window.
  const int64_t kv_tiles =
      t.q_last < p.kv_begin ? 0 : std::min(ceil_div(p.Ck, kFwdKeys), (t.q_last - p.kv_begin) / kFwdKeys + 1);
  const int64_t first_tile =
      p.window == 0 ? 0 : std::max<int64_t>(0, t.q_first - p.window + 1 - p.kv_begin) / kFwdKeys;
  for (int64_t tile = first_tile; tile < kv_tiles; ++tile) forward_kv_tile(t, tile, k_head, v_head, s);
  finish_queries(t, accumulate, s);
}

}  // namespace

void forward_block(float* out, float* lse, const AttentionChunkParams& p, bool accumulate) {
  // K and V are packed per (b, kv head) group into contiguous tiles first: read in place, their rows
  // are H·D floats apart, one or two per 4 KiB page, and a task's streaming over them stalls on TLB
  // and cache misses (measured: 15 % of the forward at D = 64). Groups go in batches whose packed
  // copy fits the pack budget, so this scratch is O(Ck·D), whatever H.
  const int D = p.D;
  const bool bf16 = p.precision == Precision::bf16;
  const bool dots = use_bf16_dot_products(p);
  const bool amx = use_amx_tiles(p);
  const int group_heads = p.H / p.Hkv;
  const int64_t q_tiles = ceil_div(p.Cq, kFwdQueries);
  const int64_t kv_tiles = ceil_div(p.Ck, kFwdKeys);
  // per group (AMX: its own layouts, flash_attention_pairs.h)
  const int64_t k_floats = kv_tiles * (amx ? amx_k_tile_words(D) : int64_t{kFwdKeys} * D);
  const int64_t v_floats = kv_tiles * (amx ? amx_v_tile_words(D) : int64_t{row_groups(D)} * kFwdKeys * kRows);
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
      if (amx) {
        pack_kv_amx(packed_k + (g - first) * k_floats, packed_v + (g - first) * v_floats, tile, nk, k_rows, v_rows,
                    k_row_stride, D);
        return;
      }
      if (dots) {
        pack_kv_pairs(packed_k + (g - first) * k_floats, packed_v + (g - first) * v_floats, tile, nk, k_rows, v_rows,
                   k_row_stride, D);
        return;
      }
      float* k_dst = packed_k + (g - first) * k_floats + kv_lo * D;
      float* v_dst = packed_v + (g - first) * v_floats + tile * row_groups(D) * kFwdKeys * kRows;
      for (int j = 0; j < nk; ++j) {
        const float* k_row = k_rows + j * k_row_stride;
        float* k_column = k_dst + (j / kRows) * D * kRows + j % kRows;
        for (int d = 0; d < D; ++d) k_column[d * kRows] = bf16 ? round_to_bf16(k_row[d]) : k_row[d];
        if (j + kPrefetchRows < nk) {
          prefetch_row(k_row + kPrefetchRows * k_row_stride, D);
          prefetch_row(v_rows + (j + kPrefetchRows) * k_row_stride, D);
        }
        pack_row_by_groups(v_dst + j * kRows, kFwdKeys * kRows, v_rows + j * k_row_stride, D, bf16);
      }
    });
    // Task t: q tile from the last (the most kv tiles under a causal mask) to the first, then the
    // q heads of the batch, those sharing a kv head next to each other.
    const int64_t heads = count * group_heads;
    run_tasks(q_tiles * heads, scratch, per_thread, [&](int64_t t, float* mine) {
      ForwardScratch s(mine, D);
      const AmxTilesScope tiles(amx);
      const int64_t q_tile = q_tiles - 1 - t / heads;
      const int64_t g = first + (t % heads) / group_heads;
      const int b = static_cast<int>(g / p.Hkv);
      const int h = static_cast<int>(g % p.Hkv) * group_heads + static_cast<int>(t % group_heads);
      forward_task(out, lse, p, accumulate, b, h, q_tile * kFwdQueries, packed_k + (g - first) * k_floats,
                   packed_v + (g - first) * v_floats, s);
    });
  }
}

}  // namespace fpdt::kernels::cpu::flash

// The CPU flash attention's backward (the design: flash_attention.h): one task per (b, kv head, 192
// keys) goes over the 96-query tiles and q heads that see its keys, on the Q and dO of its group packed
// once per call; dk and dv of its keys are added to once (+=), dq once per q tile (+=) from the tile's
// dQ summed in kv-tile order, so the result does not depend on the threads. bf16 (flash_attention.h):
// the rounded operands of the spec, the scales applied to S and to the dQ tile instead of folded into K.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <tuple>

#include "fpdt/kernels/cpu/flash_attention.h"
#include "fpdt/kernels/cpu/flash_attention_dq_order.h"
#include "fpdt/kernels/cpu/flash_attention_mask.h"
#include "fpdt/kernels/cpu/flash_attention_pairs.h"

namespace fpdt::kernels::cpu::flash {

namespace {

struct BackwardScratch {
  float* kt;        // [key panel][D][kPanel] Kᵀ of the task's keys × scale·log2 e (bf16: r(k)) (0 past nk)
  float* vt;        // [key panel][D][kPanel] Vᵀ (bf16: r(v)) (0 past nk)
  float* kp;        // [D panel][kBwdKeys][kPanel] K × scale (bf16: r(k)), by panels of kPanel head dims (0 past D)
  float* dkt;       // [key panel][amx_round(D)][kPanel] dKᵀ accumulator (unscaled; rows past D for AMX)
  float* dvt;       // [key panel][amx_round(D)][kPanel] dVᵀ accumulator
  float* sp;        // [key panel][kBwdQueries][kPanel] S, then P
  float* dpp;       // [key panel][kBwdQueries][kPanel] dP, then dS
  float* ds;        // (kBwdQueries, kBwdKeys) dS row-major
  float* dq;        // [D panel][kBwdQueries][kPanel] this pair's dQ tile
  float* lse2;      // (kBwdQueries) lse · log2 e (+inf for a row that saw nothing)
  float* delta;     // (kBwdQueries)
  int32_t* q_docs;  // (kBwdQueries)
  int32_t* k_docs;  // (kBwdKeys), padded to whole panels
  // bf16 dot products and AMX (flash_attention_pairs.h), as bf16 pairs: Kᵀ, Vᵀ [key panel][D pair][kPanel]
  // (AMX: amx_round(⌈D/2⌉) pair rows, 0 past ⌈D/2⌉); K [D panel][key pair][kPanel]; P or dS of one panel
  // [query pair][kPanel] (pw_ds: dS); dS [i][key pair].
  uint32_t *ktw, *vtw, *kpw, *pw, *pw_ds, *dsw;
  // The task's thread flushes subnormal results (panel_gemm_bf16.h): P and dS are rounded without the check.
  bool computed_under_ftz = flushes_subnormal_results();

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
        key_panels * amx_round(D) * kPanel,
        key_panels * amx_round(D) * kPanel,
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
    auto words = [&](size_t count) { return reinterpret_cast<uint32_t*>(carve.take(count)); };
    uint32_t* ktw = words(key_panels * amx_round(pairs(D)) * kPanel);
    uint32_t* vtw = words(key_panels * amx_round(pairs(D)) * kPanel);
    uint32_t* kpw = words(static_cast<size_t>(panels(D)) * pairs(kBwdKeys) * kPanel);
    uint32_t* pw = words(static_cast<size_t>(pairs(kBwdQueries)) * kPanel);
    uint32_t* pw_ds = words(static_cast<size_t>(pairs(kBwdQueries)) * kPanel);
    uint32_t* dsw = words(static_cast<size_t>(kBwdQueries) * pairs(kBwdKeys));
    if (s) {
      s->ktw = ktw;
      s->vtw = vtw;
      s->kpw = kpw;
      s->pw = pw;
      s->pw_ds = pw_ds;
      s->dsw = dsw;
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

// row (D) += the row of a tile laid out by panels: panel dp's kPanel values at src + dp·panel_stride.
void add_panels_to_row(float* row, const float* src, int64_t panel_stride, int D) {
  const int full_panels = D / kPanel;
  for (int dp = 0; dp < full_panels; ++dp) {
    const float* from = src + dp * panel_stride;
    float* to = row + dp * kPanel;
    vstore(to, vadd(vload<Vec>(to), vload<Vec>(from)));
    vstore(to + kLanes, vadd(vload<Vec>(to + kLanes), vload<Vec>(from + kLanes)));
  }
  for (int d = full_panels * kPanel; d < D; ++d) row[d] += src[full_panels * panel_stride + d % kPanel];
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
  // Q and dO of the q heads of groups [first_group, …), packed per q tile as [D group][i][kRows] (bf16
  // dot products, AMX: flash_attention_pairs.h's layouts): tile t of q head hg of group g at
  // (((g − first_group)·H/Hkv + hg)·q_tiles + t)·tile_floats.
  const float* packed_q;
  const float* packed_do;
  int64_t first_group;
  int64_t tile_floats;
  // The same tiles' dQ, summed over the kv tiles in turn ([D panel][kBwdQueries][kPanel], as a task's s.dq;
  // dq_tile_floats each) and added to dq's rows once the batch is done; written[t]: tile t holds a sum.
  float* dq_sums;
  int32_t* written;
  int64_t dq_tile_floats;
};

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
  const bool bf16 = p.precision == Precision::bf16;
  const bool dots = use_bf16_dot_products(p);
  const bool amx = use_amx_tiles(p);
  const int D2 = pairs(D), key_pairs = pairs(kBwdKeys);
  [[maybe_unused]] const int query_pairs = pairs(kBwdQueries);  // (the dot products')
  const int D2_tiles = amx_round(D2), dt_rows = amx_round(D);  // AMX's pair rows of Kᵀ, Vᵀ; rows of dKᵀ, dVᵀ
  const int kt_words = amx ? D2_tiles : D2;

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
                           bf16 ? 1.0f : qk_scale, bf16);
      transpose_into_panel(s.vt + panel * D * kPanel, v_rows + j0 * k_row_stride, k_row_stride, count, next, D, 1.0f,
                           bf16);
    }
    std::fill(s.dkt, s.dkt + panels_k * dt_rows * kPanel, 0.0f);
    std::fill(s.dvt, s.dvt + panels_k * dt_rows * kPanel, 0.0f);
    const Vec k_scale = vset<Vec>(scale);
    for (int j = 0; j < nk; ++j) {
      const float* k_row = k_rows + j * k_row_stride;
      for (int dp = 0; dp < d_panels; ++dp) {
        float* dst = s.kp + (dp * kBwdKeys + j) * kPanel;
        if ((dp + 1) * kPanel <= D) {  // a whole panel of head dims, in vectors
          for (int c = 0; c < kPanel; c += kLanes) {
            const Vec x = vload<Vec>(k_row + dp * kPanel + c);
            vstore(dst + c, bf16 ? vround_bf16(x) : vmul(x, k_scale));
          }
          continue;
        }
        for (int c = 0; c < kPanel; ++c) {
          const int d = dp * kPanel + c;
          dst[c] = d >= D ? 0.0f : bf16 ? round_to_bf16(k_row[d]) : k_row[d] * scale;
        }
      }
    }
    if (dots || amx) {  // AMX: the pair rows past the data 0, to whole K steps
      for (int panel = 0; panel < panels_k; ++panel) {
        for (auto [words, floats] : {std::pair{s.ktw, s.kt}, std::pair{s.vtw, s.vt}}) {
          uint32_t* panel_words = words + panel * kt_words * kPanel;
          pair_panel_rows(panel_words, floats + panel * D * kPanel, D);
          std::fill(panel_words + D2 * kPanel, panel_words + kt_words * kPanel, 0u);
        }
      }
      for (int dp = 0; dp < d_panels; ++dp) {
        uint32_t* panel_words = s.kpw + dp * key_pairs * kPanel;
        pair_panel_rows(panel_words, s.kp + dp * kBwdKeys * kPanel, nk);
        std::fill(panel_words + pairs(nk) * kPanel, panel_words + key_pairs * kPanel, 0u);
      }
    }
    packed = true;
  };

  const int32_t* row_q_docs = has_docs ? p.q_doc_ids + b * p.Cq : nullptr;  // (Cq) or null
  for (int64_t q_tile = visits.first; q_tile < visits.end; ++q_tile) {
    const int64_t q_lo = q_tile * kBwdQueries;
    const TokenTile queries = token_tile(q_lo, kBwdQueries, p.Cq, p.q_begin, row_q_docs, s.q_docs);
    const int mq = queries.count;
    const int64_t q_first = queries.first, q_last = queries.last;
    const DocRange q_docs = queries.docs;
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
      int64_t slot = 0;  // the tile's index in the batch's packed copies and dQ sums
      if (mask != TileMask::skip) {
        slot = ((b * p.Hkv + kv_head - args.first_group) * group + hg) * q_tiles + q_tile;
        const float* q_tile_packed = args.packed_q + slot * args.tile_floats;    // [D group][i][kRows]
        const float* do_tile_packed = args.packed_do + slot * args.tile_floats;  // [D group][i][kRows]
        const float* lse = args.lse + (static_cast<int64_t>(b) * p.H + h) * p.Cq + q_lo;
        const float* delta = args.delta + (static_cast<int64_t>(b) * p.H + h) * p.Cq + q_lo;
        for (int i = 0; i < mq; ++i) {
          s.lse2[i] = lse[i] == -kInf ? kInf : lse[i] * kLog2e;
          s.delta[i] = delta[i];
        }
        // The same tiles as bf16 pairs (flash_attention_pairs.h): by rows, then by columns.
        const auto* q_rows_pairs = reinterpret_cast<const uint32_t*>(q_tile_packed);
        const auto* do_rows_pairs = reinterpret_cast<const uint32_t*>(do_tile_packed);
        [[maybe_unused]] const uint32_t* q_columns_pairs = q_rows_pairs + args.tile_floats / 2;
        [[maybe_unused]] const uint32_t* do_columns_pairs = do_rows_pairs + args.tile_floats / 2;
        // The same tiles in the AMX layouts (flash_attention_pairs.h): by rows, then by columns.
        const auto* q_rows_amx = reinterpret_cast<const uint32_t*>(q_tile_packed);
        const auto* do_rows_amx = reinterpret_cast<const uint32_t*>(do_tile_packed);
        [[maybe_unused]] const uint32_t* q_columns_amx = q_rows_amx + amx_q_rows_words(D);
        [[maybe_unused]] const uint32_t* do_columns_amx = do_rows_amx + amx_q_rows_words(D);
        // S = Q Kᵀ (log2 units) and dP = dO Vᵀ, (rows × kPanel) per key panel
        for (int panel = 0; panel < panels_k; ++panel) {
          const Span range = rows[panel];
          if (range.end <= range.begin) continue;
#if FPDT_AMX_TILES
          if (amx) {  // from a whole tile of 16 rows (the rows before range.begin are not read)
            const int begin = range.begin / kAmxRows * kAmxRows;
            for (const auto& [a, b, c] : {std::tuple{q_rows_amx, s.ktw, s.sp}, std::tuple{do_rows_amx, s.vtw, s.dpp}})
              amx_panel_gemm<Store::overwrite>(range.end - begin, D2_tiles, a + begin * D2_tiles, D2_tiles,
                                               b + panel * D2_tiles * kPanel, c + (panel * kBwdQueries + begin) * kPanel);
            continue;
          }
#endif
#if FPDT_BF16_DOT_PRODUCTS
          if (dots) {
            for (const auto& [a, b, c] : {std::tuple{q_rows_pairs, s.ktw, s.sp}, std::tuple{do_rows_pairs, s.vtw, s.dpp}})
              bf16_panel_gemm<Store::overwrite>(range.end - range.begin, D, a + range.begin * D2, D2, 1, kRows * D2,
                                                b + panel * D2 * kPanel, c + (panel * kBwdQueries + range.begin) * kPanel);
            continue;
          }
#endif
          panel_gemm<Layout::grouped, Store::overwrite>(
              range.end - range.begin, D, q_tile_packed + range.begin * kRows, kBwdQueries * kRows, kRows * kRows,
              s.kt + panel * D * kPanel, s.sp + (panel * kBwdQueries + range.begin) * kPanel);
          panel_gemm<Layout::grouped, Store::overwrite>(
              range.end - range.begin, D, do_tile_packed + range.begin * kRows, kBwdQueries * kRows, kRows * kRows,
              s.vt + panel * D * kPanel, s.dpp + (panel * kBwdQueries + range.begin) * kPanel);
        }
        // Per key panel, P and dS, then dVᵀ (D × kPanel) += dOᵀ (D × rows) · P_panel (rows × kPanel) and
        // dKᵀ += Qᵀ · dS_panel (with bf16 pairs, P and dS as s.pw and s.pw_ds)
        for (int panel = 0; panel < panels_k; ++panel) {
          const Span range = rows[panel];
          if (range.end <= range.begin) continue;
          if (range.masked && bf16) {
            probabilities_and_ds<true, true>(s, panel, range, q_first - k_first, nk, p.window, has_docs, qk_scale,
                                             dots || amx);
          } else if (range.masked) {
            probabilities_and_ds<true, false>(s, panel, range, q_first - k_first, nk, p.window, has_docs, 1.0f, false);
          } else if (bf16) {
            probabilities_and_ds<false, true>(s, panel, range, 0, nk, 0, false, qk_scale, dots || amx);
          } else {
            probabilities_and_ds<false, false>(s, panel, range, 0, nk, 0, false, 1.0f, false);
          }
          [[maybe_unused]] const int n = range.end - range.begin;  // range.begin is a whole row group: even
#if FPDT_AMX_TILES
          if (amx) {  // P's and dS's pair rows padded with zeros to whole K steps
            for (const auto& [a, b, c] : {std::tuple{do_columns_amx, s.pw, s.dvt}, std::tuple{q_columns_amx, s.pw_ds, s.dkt}}) {
              std::fill(b + pairs(n) * kPanel, b + amx_round(pairs(n)) * kPanel, 0u);
              amx_panel_gemm<Store::accumulate>(D, pairs(n), a + range.begin / 2, kAmxTokenWords, b,
                                                c + panel * dt_rows * kPanel);
            }
            continue;
          }
#endif
#if FPDT_BF16_DOT_PRODUCTS
          if (dots) {
            for (const auto& [a, b, c] : {std::tuple{do_columns_pairs, s.pw, s.dvt}, std::tuple{q_columns_pairs, s.pw_ds, s.dkt}})
              bf16_panel_gemm<Store::accumulate>(D, n, a + (range.begin / 2) * kRows, 1, kRows, query_pairs * kRows, b,
                                                 c + panel * dt_rows * kPanel);
            continue;
          }
#endif
          panel_gemm<Layout::packed, Store::accumulate>(D, range.end - range.begin, do_tile_packed + range.begin * kRows,
                                                        0, kBwdQueries * kRows,
                                                        s.sp + (panel * kBwdQueries + range.begin) * kPanel,
                                                        s.dvt + panel * dt_rows * kPanel);
          panel_gemm<Layout::packed, Store::accumulate>(D, range.end - range.begin, q_tile_packed + range.begin * kRows,
                                                        0, kBwdQueries * kRows,
                                                        s.dpp + (panel * kBwdQueries + range.begin) * kPanel,
                                                        s.dkt + panel * dt_rows * kPanel);
        }
        // dQ tile (mq × kPanel per D panel) = dS (mq × nk) · (scale K) (nk × kPanel), each row group over
        // the keys it may see (none: zero); in bf16 r(dS) · r(K), scaled when added to dq
#if FPDT_AMX_TILES
        if (amx) {  // by whole tiles of 16 rows, over the key panels any of its rows sees, dS 0 where a row does not
          for (int i0 = 0; i0 < mq; i0 += kAmxRows) {
            int first = panels_k, end = 0;
            for (int panel = 0; panel < panels_k; ++panel)
              if (rows[panel].begin < i0 + kAmxRows && i0 < rows[panel].end) {
                first = std::min(first, panel);
                end = panel + 1;
              }
            for (int i = i0; i < i0 + kAmxRows; ++i)  // (the rows' words of the panels they see: probabilities_and_ds)
              for (int panel = first; panel < end; ++panel) {
                uint32_t* dst = s.dsw + i * key_pairs + panel * (kPanel / 2);
                if (i >= mq || i < rows[panel].begin || rows[panel].end <= i) std::fill(dst, dst + kPanel / 2, 0u);
              }
            const int key_words = first < end ? (end - first) * (kPanel / 2) : 0;
            for (int dp = 0; dp < d_panels; ++dp)
              amx_panel_gemm<Store::overwrite>(kAmxRows, key_words, s.dsw + i0 * key_pairs + first * (kPanel / 2), key_pairs,
                                               s.kpw + (dp * key_pairs + first * (kPanel / 2)) * kPanel,
                                               s.dq + (dp * kBwdQueries + i0) * kPanel);
          }
        }
#endif
        for (int g = 0; g * kRows < (amx ? 0 : mq); ++g) {
          const Span keys = dq_keys[g];
#if FPDT_BF16_DOT_PRODUCTS
          if (dots) {  // keys.begin is a whole panel: even; the group's rows of dS as pairs: probabilities_and_ds
            const int rows_in_group = std::min(kRows, mq - g * kRows);
            for (int dp = 0; dp < d_panels; ++dp)
              bf16_panel_gemm<Store::overwrite>(rows_in_group, keys.end - keys.begin,
                                                s.dsw + g * kRows * key_pairs + keys.begin / 2, key_pairs, 1, 0,
                                                s.kpw + (dp * key_pairs + keys.begin / 2) * kPanel,
                                                s.dq + (dp * kBwdQueries + g * kRows) * kPanel);
            continue;
          }
#endif
          for (int dp = 0; dp < d_panels; ++dp)
            panel_gemm<Layout::rows, Store::overwrite>(std::min(kRows, mq - g * kRows), keys.end - keys.begin,
                                                       s.ds + g * kRows * kBwdKeys + keys.begin, kBwdKeys, 0,
                                                       s.kp + (dp * kBwdKeys + keys.begin) * kPanel,
                                                       s.dq + (dp * kBwdQueries + g * kRows) * kPanel);
        }
      }
      std::atomic<int32_t>& counter = args.counters[(static_cast<int64_t>(b) * p.H + h) * q_tiles + q_tile];
      wait_for_turn(counter, turn);
      if (mask != TileMask::skip) {  // into the tile's sum, in its contiguous rows (bf16: scaled here)
        const Vec dq_scale = vset<Vec>(bf16 ? scale : 1.0f);
        const bool first = args.written[slot] == 0;
        float* sum = args.dq_sums + slot * args.dq_tile_floats;
        for (int dp = 0; dp < d_panels; ++dp) {
          const float* src = s.dq + dp * kBwdQueries * kPanel;
          float* dst = sum + dp * kBwdQueries * kPanel;
          for (int x = 0; x < mq * kPanel; x += kLanes) {
            const Vec term = vload<Vec>(src + x);
            vstore(dst + x, first ? vmul(term, dq_scale) : vfma(term, dq_scale, vload<Vec>(dst + x)));
          }
        }
        args.written[slot] = 1;
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
    column_to_row<true>(dk_row, s.dkt + (j / kPanel) * dt_rows * kPanel + j % kPanel, D, scale);
    column_to_row<true>(dv_row, s.dvt + (j / kPanel) * dt_rows * kPanel + j % kPanel, D, 1.0f);
  }
}

}  // namespace

void backward_block(float* dq, float* dk, float* dv, const float* dout, const float* lse, const float* delta,
                    const AttentionChunkParams& p) {
  // Q and dO are packed per (b, kv head) group first (their rows are H·D floats apart in place; see
  // the forward), by q tiles in the [D group][i][kRows] layout both of their products read. Groups
  // go in batches whose packed copy and dQ sums fit the pack budget: O(Cq·D·H/Hkv) scratch, whatever H.
  const int D = p.D;
  const bool bf16 = p.precision == Precision::bf16;
  const bool dots = use_bf16_dot_products(p);
  const bool amx = use_amx_tiles(p);
  const int group_heads = p.H / p.Hkv;
  const int64_t q_tiles = ceil_div(p.Cq, kBwdQueries);
  const int64_t kv_tiles = ceil_div(p.Ck, kBwdKeys);
  const int64_t groups = static_cast<int64_t>(p.B) * p.Hkv;  // (b, kv head) pairs
  const int64_t tile_floats =
      amx ? static_cast<int64_t>(round_up16(amx_q_tile_words(D))) : int64_t{row_groups(D)} * kBwdQueries * kRows;
  const int64_t dq_tile_floats = int64_t{panels(D)} * kBwdQueries * kPanel;
  const int64_t group_tiles = group_heads * q_tiles;
  // a group's packed Q and dO, its dQ sums and their written flags (as floats)
  const int64_t group_floats = group_tiles * (2 * tile_floats + dq_tile_floats + 1);
  const int64_t batch = std::clamp<int64_t>(pack_budget_floats.load() / group_floats, 1, groups);
  thread_local Counters counters;
  const size_t per_thread = round_up16(BackwardScratch::floats(D));
  const int threads = omp_get_max_threads();
  float* scratch = kernel_workspace().floats(per_thread * threads + batch * group_floats);
  float* packed_q = scratch + per_thread * threads;
  float* packed_do = packed_q + batch * group_tiles * tile_floats;
  float* dq_sums = packed_do + batch * group_tiles * tile_floats;
  auto* written = reinterpret_cast<int32_t*>(dq_sums + batch * group_tiles * dq_tile_floats);
  BackwardArgs args{dq,       dk,        dv,      dout,    lse,           delta,
                    &p,       counters.zeroed(static_cast<size_t>(p.B) * p.H * q_tiles),
                    packed_q, packed_do, 0,       tile_floats, dq_sums, written, dq_tile_floats};
  for (int64_t first = 0; first < groups; first += batch) {
    const int64_t count = std::min(batch, groups - first);
    const int64_t head_tiles = count * group_heads * q_tiles;
    std::fill(written, written + head_tiles, 0);
    // Tile t of the batch: q tile t % q_tiles of q head hg of group g, t / q_tiles = (g − first)·group_heads + hg;
    // its first row's offset (b·Cq + q_lo)·H + h in q, dO and dq (rows H·D floats apart), and its mq rows.
    struct BatchTile {
      int64_t row_offset;
      int mq;
    };
    auto batch_tile = [&](int64_t t) {
      const int64_t q_tile = t % q_tiles, slot = t / q_tiles;
      const int64_t g = first + slot / group_heads;
      const int64_t h = (g % p.Hkv) * group_heads + slot % group_heads, b = g / p.Hkv;
      const int64_t q_lo = q_tile * kBwdQueries;
      return BatchTile{(b * p.Cq + q_lo) * p.H + h, static_cast<int>(std::min<int64_t>(kBwdQueries, p.Cq - q_lo))};
    };
    run_tasks(head_tiles, scratch, per_thread, [&](int64_t t, float*) {
      const auto [row_offset, mq] = batch_tile(t);
      const int64_t row_stride = static_cast<int64_t>(p.H) * D;
      const float* q_rows = p.q + row_offset * D;
      const float* do_rows = dout + row_offset * D;
      if (amx) {
        pack_q_tile_amx(packed_q + t * tile_floats, q_rows, row_stride, mq, D);
        pack_q_tile_amx(packed_do + t * tile_floats, do_rows, row_stride, mq, D);
        return;
      }
      if (dots) {
        pack_q_tile_pairs(packed_q + t * tile_floats, tile_floats, q_rows, row_stride, mq, D);
        pack_q_tile_pairs(packed_do + t * tile_floats, tile_floats, do_rows, row_stride, mq, D);
        return;
      }
      for (int i = 0; i < mq; ++i) {
        if (i + kPrefetchRows < mq) {
          prefetch_row(q_rows + (i + kPrefetchRows) * row_stride, D);
          prefetch_row(do_rows + (i + kPrefetchRows) * row_stride, D);
        }
        pack_row_by_groups(packed_q + t * tile_floats + i * kRows, kBwdQueries * kRows, q_rows + i * row_stride, D,
                           bf16);
        pack_row_by_groups(packed_do + t * tile_floats + i * kRows, kBwdQueries * kRows, do_rows + i * row_stride, D,
                           bf16);
      }
    });
    args.first_group = first;
    // Task t: kv tile t / count (the first tiles have the most q tiles under a causal mask), then the
    // group. A task waits only on the same group's lower kv tiles, handed out earlier.
    run_tasks(kv_tiles * count, scratch, per_thread, [&](int64_t t, float* mine) {
      BackwardScratch s(mine, D);
      const AmxTilesScope tiles(amx);
      const int64_t g = first + t % count;
      backward_task(args, static_cast<int>(g / p.Hkv), static_cast<int>(g % p.Hkv), t / count, s);
    });
    // dq += each tile's sum, once: dq's rows, H·D floats apart, are passed over here alone instead of by
    // every kv tile's turn (bench/RESULTS.md, Attention v12)
    run_tasks(head_tiles, scratch, per_thread, [&](int64_t t, float*) {
      if (written[t] == 0) return;  // no visible pair of this q tile in the block: dq as it was
      const auto [row_offset, mq] = batch_tile(t);
      const float* sum = dq_sums + t * dq_tile_floats;
      for (int i = 0; i < mq; ++i)
        add_panels_to_row(dq + (row_offset + i * p.H) * D, sum + i * kPanel, kBwdQueries * kPanel, D);
    });
  }
}

}  // namespace fpdt::kernels::cpu::flash

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
#include "fpdt/kernels/cpu/flash_attention_backward.h"
#include "fpdt/kernels/cpu/flash_attention_backward_bf16.h"
#include "fpdt/kernels/cpu/flash_attention_backward_softmax.h"
#include "fpdt/kernels/cpu/flash_attention_dq_order.h"
#include "fpdt/kernels/cpu/flash_attention_mask.h"
#include "fpdt/kernels/cpu/flash_attention_pairs.h"

namespace fpdt::kernels::cpu::flash {

namespace {

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

// The task's Kᵀ, Vᵀ (bf16: r(k), r(v); fp32: Kᵀ × scale·log2 e) and K (× scale; bf16: r(k)) by panels, and
// its dKᵀ, dVᵀ accumulators zeroed; with bf16 pairs, the same as pairs.
void pack_task_keys(const TaskKeys& t, BackwardScratch& s) {
  const AttentionChunkParams& p = *t.p;
  const int D = t.D;
  const int64_t k_row_stride = static_cast<int64_t>(p.Hkv) * D;
  const float* k_rows = p.k + ((t.b * p.Ck + t.kv_lo) * p.Hkv + t.kv_head) * D;
  const float* v_rows = p.v + ((t.b * p.Ck + t.kv_lo) * p.Hkv + t.kv_head) * D;
  for (int panel = 0; panel < t.panels_k; ++panel) {
    const int j0 = panel * kPanel, count = std::min(kPanel, t.nk - j0);
    const int next = std::clamp(t.nk - j0 - kPanel, 0, kPanel);
    transpose_into_panel(s.kt + panel * D * kPanel, k_rows + j0 * k_row_stride, k_row_stride, count, next, D,
                         t.bf16 ? 1.0f : t.qk_scale, t.bf16);
    transpose_into_panel(s.vt + panel * D * kPanel, v_rows + j0 * k_row_stride, k_row_stride, count, next, D, 1.0f,
                         t.bf16);
  }
  std::fill(s.dkt, s.dkt + t.panels_k * t.dt_rows * kPanel, 0.0f);
  std::fill(s.dvt, s.dvt + t.panels_k * t.dt_rows * kPanel, 0.0f);
  const Vec k_scale = vset<Vec>(t.scale);
  for (int j = 0; j < t.nk; ++j) {
    const float* k_row = k_rows + j * k_row_stride;
    for (int dp = 0; dp < t.d_panels; ++dp) {
      float* dst = s.kp + (dp * kBwdKeys + j) * kPanel;
      if ((dp + 1) * kPanel <= D) {  // a whole panel of head dims, in vectors
        for (int c = 0; c < kPanel; c += kLanes) {
          const Vec x = vload<Vec>(k_row + dp * kPanel + c);
          vstore(dst + c, t.bf16 ? vround_bf16(x) : vmul(x, k_scale));
        }
        continue;
      }
      for (int c = 0; c < kPanel; ++c) {
        const int d = dp * kPanel + c;
        dst[c] = d >= D ? 0.0f : t.bf16 ? round_to_bf16(k_row[d]) : k_row[d] * t.scale;
      }
    }
  }
  if (t.dots || t.amx) pair_task_keys(t, s);
}

// Per key panel, the rows [begin, end) of the q tile that may see its keys by position, and whether
// they need the mask: on the diagonal a key panel skips the queries before its first key, so the
// pair is computed down to kRows × kPanel blocks, not whole. Both bounds grow with the panel, and
// a panel is left out only by position (classify judges documents by the whole tiles' ranges), so
// those come first or last: the key panels a row group needs are consecutive, and its dQ reads the
// keys [dq_keys[g].begin, dq_keys[g].end).
void rows_of_key_panels(const TaskKeys& t, TileMask mask, const TokenTile& queries, DocRange k_docs,
                        Span rows[kBwdPanels], Span dq_keys[kBwdQueries / kRows]) {
  const int64_t window = t.p->window;
  for (int panel = 0; panel < t.panels_k; ++panel) {
    const int64_t panel_first = t.k_first + panel * kPanel, panel_last = std::min(panel_first + kPanel - 1, t.k_last);
    Span& range = rows[panel];
    range = rows_seeing(queries.first, queries.count, panel_first, panel_last, window);
    if (range.end <= range.begin) continue;
    const TileMask panel_mask = mask == TileMask::full
                                    ? TileMask::full
                                    : classify(queries.first + range.begin, queries.first + range.end - 1, panel_first,
                                               panel_last, window, t.has_docs, queries.docs, k_docs);
    if (panel_mask == TileMask::skip) range = {};
    range.masked = panel_mask != TileMask::full || panel_last - panel_first + 1 < kPanel;  // or padding keys
  }
  for (int g = 0; g * kRows < queries.count; ++g) {
    int first = t.panels_k, end = 0;
    for (int panel = 0; panel < t.panels_k; ++panel) {
      if (rows[panel].begin <= g * kRows && g * kRows < rows[panel].end) {
        first = std::min(first, panel);
        end = panel + 1;
      }
    }
    dq_keys[g] = first < end ? Span{first * kPanel, std::min(t.nk, end * kPanel)} : Span{};
  }
}

// One pair (q tile of the packed q_tile and do_tile, [D group][i][kRows], q head h; the task's keys):
// S = Q Kᵀ (log2 units) and dP = dO Vᵀ, P and dS, dVᵀ += dOᵀ P, dKᵀ += Qᵀ dS and its dQ tile in s.dq.
void pair_backward(const BackwardArgs& args, const TaskKeys& t, BackwardScratch& s, const float* q_tile,
                   const float* do_tile, int h, int64_t q_lo, const TokenTile& queries, const Span* rows,
                   const Span* dq_keys) {
  const AttentionChunkParams& p = *t.p;
  const int D = t.D, mq = queries.count;
  const float* lse = args.lse + (static_cast<int64_t>(t.b) * p.H + h) * p.Cq + q_lo;
  const float* delta = args.delta + (static_cast<int64_t>(t.b) * p.H + h) * p.Cq + q_lo;
  for (int i = 0; i < mq; ++i) {
    s.lse2[i] = lse[i] == -kInf ? kInf : lse[i] * kLog2e;
    s.delta[i] = delta[i];
  }
  // S and dP, (rows × kPanel) per key panel
  for (int panel = 0; panel < t.panels_k; ++panel) {
    const Span range = rows[panel];
    if (range.end <= range.begin) continue;
#if FPDT_AMX_TILES
    if (t.amx) {
      scores_amx(t, s, q_tile, do_tile, panel, range);
      continue;
    }
#endif
#if FPDT_BF16_DOT_PRODUCTS
    if (t.dots) {
      scores_dots(t, s, q_tile, do_tile, panel, range);
      continue;
    }
#endif
    panel_gemm<Layout::grouped, Store::overwrite>(range.end - range.begin, D, q_tile + range.begin * kRows,
                                                  kBwdQueries * kRows, kRows * kRows, s.kt + panel * D * kPanel,
                                                  s.sp + (panel * kBwdQueries + range.begin) * kPanel);
    panel_gemm<Layout::grouped, Store::overwrite>(range.end - range.begin, D, do_tile + range.begin * kRows,
                                                  kBwdQueries * kRows, kRows * kRows, s.vt + panel * D * kPanel,
                                                  s.dpp + (panel * kBwdQueries + range.begin) * kPanel);
  }
  // Per key panel, P and dS, then dVᵀ (D × kPanel) += dOᵀ (D × rows) · P_panel (rows × kPanel) and
  // dKᵀ += Qᵀ · dS_panel (with bf16 pairs, P and dS as s.pw and s.pw_ds)
  const int64_t q_rel = queries.first - t.k_first;
  for (int panel = 0; panel < t.panels_k; ++panel) {
    const Span range = rows[panel];
    if (range.end <= range.begin) continue;
    if (range.masked && t.bf16) {
      probabilities_and_ds<true, true>(s, panel, range, q_rel, t.nk, p.window, t.has_docs, t.qk_scale, t.dots || t.amx);
    } else if (range.masked) {
      probabilities_and_ds<true, false>(s, panel, range, q_rel, t.nk, p.window, t.has_docs, 1.0f, false);
    } else if (t.bf16) {
      probabilities_and_ds<false, true>(s, panel, range, 0, t.nk, 0, false, t.qk_scale, t.dots || t.amx);
    } else {
      probabilities_and_ds<false, false>(s, panel, range, 0, t.nk, 0, false, 1.0f, false);
    }
#if FPDT_AMX_TILES
    if (t.amx) {
      dk_dv_amx(t, s, q_tile, do_tile, panel, range);
      continue;
    }
#endif
#if FPDT_BF16_DOT_PRODUCTS
    if (t.dots) {
      dk_dv_dots(t, s, q_tile, do_tile, args.tile_floats, panel, range);
      continue;
    }
#endif
    panel_gemm<Layout::packed, Store::accumulate>(D, range.end - range.begin, do_tile + range.begin * kRows, 0,
                                                  kBwdQueries * kRows,
                                                  s.sp + (panel * kBwdQueries + range.begin) * kPanel,
                                                  s.dvt + panel * t.dt_rows * kPanel);
    panel_gemm<Layout::packed, Store::accumulate>(D, range.end - range.begin, q_tile + range.begin * kRows, 0,
                                                  kBwdQueries * kRows,
                                                  s.dpp + (panel * kBwdQueries + range.begin) * kPanel,
                                                  s.dkt + panel * t.dt_rows * kPanel);
  }
  // dQ tile (mq × kPanel per D panel) = dS (mq × nk) · (scale K) (nk × kPanel), each row group over
  // the keys it may see (none: zero); in bf16 r(dS) · r(K), scaled when added to dq
#if FPDT_AMX_TILES
  if (t.amx) dq_tile_amx(t, s, rows, mq);
#endif
  for (int g = 0; g * kRows < (t.amx ? 0 : mq); ++g) {
    const Span keys = dq_keys[g];
#if FPDT_BF16_DOT_PRODUCTS
    if (t.dots) {
      dq_group_dots(t, s, g, keys, mq);
      continue;
    }
#endif
    for (int dp = 0; dp < t.d_panels; ++dp)
      panel_gemm<Layout::rows, Store::overwrite>(std::min(kRows, mq - g * kRows), keys.end - keys.begin,
                                                 s.ds + g * kRows * kBwdKeys + keys.begin, kBwdKeys, 0,
                                                 s.kp + (dp * kBwdKeys + keys.begin) * kPanel,
                                                 s.dq + (dp * kBwdQueries + g * kRows) * kPanel);
  }
}

// The pair's dQ tile (s.dq, mq rows) into its sum, in its contiguous rows (bf16: scaled here); `slot`:
// the tile's index in the batch's dQ sums.
void add_to_dq_sum(const BackwardArgs& args, const TaskKeys& t, const BackwardScratch& s, int64_t slot, int mq) {
  const Vec dq_scale = vset<Vec>(t.bf16 ? t.scale : 1.0f);
  const bool first = args.written[slot] == 0;
  float* sum = args.dq_sums + slot * args.dq_tile_floats;
  for (int dp = 0; dp < t.d_panels; ++dp) {
    const float* src = s.dq + dp * kBwdQueries * kPanel;
    float* dst = sum + dp * kBwdQueries * kPanel;
    for (int x = 0; x < mq * kPanel; x += kLanes) {
      const Vec term = vload<Vec>(src + x);
      vstore(dst + x, first ? vmul(term, dq_scale) : vfma(term, dq_scale, vload<Vec>(dst + x)));
    }
  }
  args.written[slot] = 1;
}

// dk (× scale) and dv of the task's keys += the accumulated dKᵀ, dVᵀ, gathered back into rows.
void add_task_dk_dv(const BackwardArgs& args, const TaskKeys& t, const BackwardScratch& s) {
  const AttentionChunkParams& p = *t.p;
  const int D = t.D;
  for (int j = 0; j < t.nk; ++j) {
    const int64_t row = (t.b * p.Ck + t.kv_lo + j) * p.Hkv + t.kv_head;
    float* dk_row = args.dk + row * D;
    float* dv_row = args.dv + row * D;
    if (j + kPrefetchRows < t.nk) {
      prefetch_row(dk_row + kPrefetchRows * p.Hkv * D, D);
      prefetch_row(dv_row + kPrefetchRows * p.Hkv * D, D);
    }
    column_to_row<true>(dk_row, s.dkt + (j / kPanel) * t.dt_rows * kPanel + j % kPanel, D, t.scale);
    column_to_row<true>(dv_row, s.dvt + (j / kPanel) * t.dt_rows * kPanel + j % kPanel, D, 1.0f);
  }
}

TaskKeys task_keys(const AttentionChunkParams& p, int b, int kv_head, int64_t kv_tile) {
  TaskKeys t;
  t.p = &p;
  t.b = b;
  t.kv_head = kv_head;
  t.kv_lo = kv_tile * kBwdKeys;
  t.nk = static_cast<int>(std::min<int64_t>(kBwdKeys, p.Ck - t.kv_lo));
  t.panels_k = (t.nk + kPanel - 1) / kPanel;
  t.k_first = p.kv_begin + t.kv_lo;
  t.k_last = t.k_first + t.nk - 1;
  t.has_docs = p.q_doc_ids != nullptr;
  t.D = p.D;
  t.d_panels = panels(p.D);
  t.qk_scale = static_cast<float>(p.scale) * kLog2e;
  t.scale = static_cast<float>(p.scale);
  t.bf16 = p.precision == Precision::bf16;
  t.dots = use_bf16_dot_products(p);
  t.amx = use_amx_tiles(p);
  t.D2 = pairs(p.D);
  t.key_pairs = pairs(kBwdKeys);
  t.query_pairs = pairs(kBwdQueries);
  t.D2_tiles = amx_round(t.D2);
  t.dt_rows = amx_round(p.D);
  t.kt_words = t.amx ? t.D2_tiles : t.D2;
  return t;
}

// One backward task: keys [kv_lo, kv_lo + nk) of kv head kv_head in batch b, against every q tile
// that may see them and every q head of the group.
void backward_task(const BackwardArgs& args, int b, int kv_head, int64_t kv_tile, BackwardScratch& s) {
  const AttentionChunkParams& p = *args.p;
  const TaskKeys t = task_keys(p, b, kv_head, kv_tile);
  const int group = p.H / p.Hkv;
  const int64_t q_tiles = ceil_div(p.Cq, kBwdQueries);
  const QTileRange visits = visited_q_tiles(p, kv_tile, q_tiles);

  DocRange k_docs;
  if (t.has_docs) {
    const int32_t* docs = p.kv_doc_ids + b * p.Ck + t.kv_lo;
    for (int j = 0; j < kBwdKeys; ++j) s.k_docs[j] = docs[std::min(j, t.nk - 1)];
    k_docs = doc_range(docs, t.nk);
  }
  bool packed = false;
  const int32_t* row_q_docs = t.has_docs ? p.q_doc_ids + b * p.Cq : nullptr;  // (Cq) or null
  for (int64_t q_tile = visits.first; q_tile < visits.end; ++q_tile) {
    const int64_t q_lo = q_tile * kBwdQueries;
    const TokenTile queries = token_tile(q_lo, kBwdQueries, p.Cq, p.q_begin, row_q_docs, s.q_docs);
    TileMask mask =
        classify(queries.first, queries.last, t.k_first, t.k_last, p.window, t.has_docs, queries.docs, k_docs);
    if (mask == TileMask::full && t.nk % kPanel != 0) mask = TileMask::mask;  // padding keys of the last panel
    if (mask != TileMask::skip && !packed) {
      pack_task_keys(t, s);
      packed = true;
    }
    const int32_t turn = static_cast<int32_t>(kv_tile - first_visitor(p, q_tile, q_tiles));  // into this dq tile
    Span rows[kBwdPanels], dq_keys[kBwdQueries / kRows];
    if (mask != TileMask::skip) rows_of_key_panels(t, mask, queries, k_docs, rows, dq_keys);

    for (int hg = 0; hg < group; ++hg) {
      const int h = kv_head * group + hg;
      int64_t slot = 0;  // the tile's index in the batch's packed copies and dQ sums
      if (mask != TileMask::skip) {
        slot = ((b * p.Hkv + kv_head - args.first_group) * group + hg) * q_tiles + q_tile;
        pair_backward(args, t, s, args.packed_q + slot * args.tile_floats, args.packed_do + slot * args.tile_floats,
                      h, q_lo, queries, rows, dq_keys);
      }
      std::atomic<int32_t>& counter = args.counters[(static_cast<int64_t>(b) * p.H + h) * q_tiles + q_tile];
      wait_for_turn(counter, turn);
      if (mask != TileMask::skip) add_to_dq_sum(args, t, s, slot, queries.count);
      counter.store(turn + 1, std::memory_order_release);
    }
  }
  if (packed) add_task_dk_dv(args, t, s);  // else no pair of this task was visible
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

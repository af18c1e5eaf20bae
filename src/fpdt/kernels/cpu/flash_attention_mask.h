// The attention mask of the CPU flash attention at tile granularity: which (q tile, kv tile) pairs
// are skipped, computed whole or masked, and which rows or keys of a tile one panel of the other side
// needs. The rule itself is kernels/ops.h's position_visible (plus equal document ids); these only
// bound where it can hold, and the per-lane masks inside the tiles ask it again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "fpdt/kernels/cpu/flash_attention.h"
#include "fpdt/kernels/ops.h"

namespace fpdt::kernels::cpu::flash {

// Document ids of a tile: smallest and largest.
struct DocRange {
  int32_t lo = 0, hi = 0;
};
inline DocRange doc_range(const int32_t* docs, int n) {
  DocRange range{docs[0], docs[0]};
  for (int i = 1; i < n; ++i) {
    range.lo = std::min(range.lo, docs[i]);
    range.hi = std::max(range.hi, docs[i]);
  }
  return range;
}

// The tile [lo, lo + count) of a block's tokens, count = min(tile_tokens, block_tokens − lo): its
// positions [first, last] and, with document ids (docs: the block's, of this batch row; else null), their
// copy into docs_copy (count) and their range.
struct TokenTile {
  int count = 0;
  int64_t first = 0, last = 0;
  DocRange docs;
};
inline TokenTile token_tile(int64_t lo, int tile_tokens, int64_t block_tokens, int64_t block_begin, const int32_t* docs,
                            int32_t* docs_copy) {
  TokenTile tile;
  tile.count = static_cast<int>(std::min<int64_t>(tile_tokens, block_tokens - lo));
  tile.first = block_begin + lo;
  tile.last = tile.first + tile.count - 1;
  if (docs) {
    std::memcpy(docs_copy, docs + lo, sizeof(int32_t) * tile.count);
    tile.docs = doc_range(docs_copy, tile.count);
  }
  return tile;
}

// How a (q tile, kv tile) pair is masked: skip (no visible pair), full (every pair visible) or mask.
// By position: the pair nearest the diagonal (q_last, k_first) is the first to fall above it, the
// farthest (q_first, k_last) the first to fall out of the window; docs may mask any pair.
enum class TileMask { skip, full, mask };
inline TileMask classify(int64_t q_first, int64_t q_last, int64_t k_first, int64_t k_last, int64_t window, bool has_docs,
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

inline int32_t clamp_to_int(int64_t value, int64_t lo, int64_t hi) {
  return static_cast<int32_t>(std::clamp(value, lo, hi));
}

// Rows [begin, end) of a tile that one panel of the other side needs, and whether they need the mask.
struct Span {
  int begin = 0, end = 0;
  bool masked = false;
};
// The keys of a kv tile (nk keys from position k_first) that some query of positions [q_first, q_last]
// may see by position, begin rounded down to a whole key group; empty if none.
inline Span keys_seen(int64_t q_first, int64_t q_last, int64_t k_first, int nk, int64_t window) {
  const int64_t end = std::min<int64_t>(nk, q_last - k_first + 1);
  const int64_t begin = window == 0 ? 0 : std::max<int64_t>(0, q_first - window + 1 - k_first) / kRows * kRows;
  if (end <= begin) return {};
  return {static_cast<int>(begin), static_cast<int>(end)};
}
// The rows of a q tile (mq queries from position q_first) that may see some key of positions
// [k_first, k_last] by position, rounded out to whole row groups (end at most mq); empty if none.
inline Span rows_seeing(int64_t q_first, int mq, int64_t k_first, int64_t k_last, int64_t window) {
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

}  // namespace fpdt::kernels::cpu::flash

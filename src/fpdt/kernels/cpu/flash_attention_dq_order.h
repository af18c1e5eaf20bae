// The order in which the CPU flash attention's backward tasks add into dq (the design: flash_attention.h):
// which q tiles a kv tile's task visits, which kv tile visits a q tile first, and the per-(b, q head,
// q tile) turn counters that make those additions go in kv-tile order — so dq does not depend on the
// threads. Used by flash_attention_backward.cpp alone.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "fpdt/kernels/cpu/flash_attention.h"

namespace fpdt::kernels::cpu::flash {

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

// Waits until it is kv tile `turn`'s turn to add into this (b, q head, q tile)'s dq.
inline void wait_for_turn(const std::atomic<int32_t>& counter, int32_t turn) {
  int spins = 0;
  while (counter.load(std::memory_order_acquire) != turn) {
    if (++spins < 256) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

// The q tiles [first, end) the backward task of kv tile `kv_tile` visits: from the first whose last
// row (as if the q tile were whole) is causally at or after the kv tile's first key; with a window, up
// to the last whose first row is within the window of the kv tile's last key (as if it were whole).
// Both bounds grow with kv_tile, so the visitors of a q tile are consecutive kv tiles, and they add
// into its dq in order: first_visitor(q_tile), first_visitor + 1, …
struct QTileRange {
  int64_t first, end;
};
inline QTileRange visited_q_tiles(const AttentionChunkParams& p, int64_t kv_tile, int64_t q_tiles) {
  const int64_t k_first = p.kv_begin + kv_tile * kBwdKeys;
  const int64_t first = k_first <= p.q_begin ? 0 : std::min(q_tiles, (k_first - p.q_begin) / kBwdQueries);
  if (p.window == 0) return {first, q_tiles};
  const int64_t last_row = k_first + kBwdKeys - 1 + p.window - 1 - p.q_begin;  // of the q block, that sees a key
  const int64_t end = last_row < 0 ? 0 : std::min(q_tiles, last_row / kBwdQueries + 1);
  return {first, std::max(first, end)};
}

// The first kv tile whose backward task visits q tile `q_tile` (kv tile 0 without a window).
inline int64_t first_visitor(const AttentionChunkParams& p, int64_t q_tile, int64_t q_tiles) {
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

}  // namespace fpdt::kernels::cpu::flash

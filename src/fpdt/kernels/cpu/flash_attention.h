// What the CPU flash attention's files share (flash_attention.cpp: the entry points; _forward.cpp,
// _decode.cpp (a block of one query row), _backward.cpp and its _backward*.h: the kernels; _mask.h: the
// mask by tiles; _dq_order.h: the dq order; _pairs.h: the bf16 pair packings; panel_gemm.h,
// panel_gemm_bf16.h: the products; simd.h: the vectors): the tile sizes, the scratch and the task loop.
// Not part of the backend's interface.
//
// FlashAttention-2 tiling with micro-kernels of our own (no BLAS), AVX-512 where the build targets it,
// else AVX2/FMA, parallel across tiles with OpenMP. Every product is a panel GEMM (panel_gemm.h).
// Operands are laid out so that vectors always run along tokens (queries or keys), never along the
// head dim D — hence any D works, and the softmax reductions are vertical:
//   forward, task (b, q head, 192 queries), over 96-key tiles: Sᵀ (keys × queries) = K · Qᵀ,
//     online softmax down the key rows, Oᵀ (D × queries) = α ∘ Oᵀ + Vᵀ · Pᵀ; scores are in log2
//     units (scale·log2 e folded into the packed Qᵀ) so p = 2^(s − m) by a polynomial exp2.
//   backward, task (b, kv head, 192 keys), over the 96-query tiles that see it and the q heads of the
//     group: S = Q Kᵀ and dP = dO Vᵀ (queries × keys), P = 2^(S − lse), dS = P ∘ (dP − Δ),
//     dVᵀ += dOᵀ P, dKᵀ += Qᵀ dS (accumulated per task, written once), dQ_tile = dS K.
//     dQ tiles are summed in kv-tile order, each (b, q head, q tile) guarded by a turn counter, into a
//     contiguous tile of the call's scratch, and each sum is added to dq's rows once after the tasks —
//     so dq is deterministic without a per-thread copy of it (tasks go out in increasing order, and a
//     task only ever waits for a lower-numbered one: no deadlock), and the turns' additions stream
//     through contiguous tiles instead of rows H·D floats apart (−5–6 % of the 8K backward).
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
// bf16 (Precision::bf16, the spec: reference/attention_chunk.h): the operands are rounded where they are
// packed or transposed, the scale moves from the packed Qᵀ / Kᵀ / K onto the scores and the dQ tile,
// P̃, P and dS are rounded as the softmax writes them, and the forward's running max is an integer in
// log2 units (so r(P̃) is the spec's, whatever the tiling). The products then run on AMX-BF16 tiles
// (panel_gemm_amx.h; the operands packed as bf16 pairs in rows padded to whole tiles, the softmax
// writing P̃, P, dS as pairs), or on AVX512-BF16's dot products (panel_gemm_bf16.h; the same pairs in
// the fp32 path's layouts), or, on a CPU or build without either, on the fp32 panel products over the
// same rounded values: the same sums within fp32 reordering. The choice: use_amx_tiles (on by default),
// then use_bf16_dot_products (on where they are double-rate: see bf16_dot_products_allowed), by the
// CPU's flags at run time. An AMX product computes whole 16-row tiles and 32-value K steps: the rows
// before a span's begin (down to a multiple of 16) and past its end are computed and not read; its
// operands' padding is zeros (B) or finite values (A).
// Scratch is one workspace owned by the calling thread, grown when a call needs more and reused:
// a few tiles per OpenMP thread (size set by D) plus the packed copies — in backward with the dQ sums of
// the same q tiles (capped together, see set_pack_budget_floats) — and in backward one counter per
// (b, q head, q tile).
#pragma once

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cpu/panel_gemm.h"
#include "fpdt/kernels/cpu/panel_gemm_amx.h"
#include "fpdt/kernels/cpu/panel_gemm_bf16.h"
#include "fpdt/kernels/ops.h"

namespace fpdt::kernels::cpu::flash {

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
// Cap on the packed K/V (forward) or Q/dO and dQ sums (backward) of one call: set_pack_budget_floats.
inline std::atomic<int64_t> pack_budget_floats{int64_t{8} << 20};
// Whether bf16 attention may use AVX512-BF16 where the CPU has it (CpuBackend::set_bf16_dot_products).
// By default only where they run at twice the FMAs' FLOP rate (bf16_dot_products_double_rate: AMD's Zen 4
// and 5, where they run attention at 1.55–1.69× the fp32 products on the same rounded operands,
// bench/RESULTS.md Attention v9). On the Sapphire-Rapids-class Xeon this was built on, vdpbf16ps issues at
// half FMA's rate — the same FLOP rate (421 vs 420 GFLOP/s, one thread) — so the pairs only add their
// packing, and the attention ran at 0.7× the fp32 products. Tests run every path.
inline std::atomic<bool> bf16_dot_products_allowed{bf16_dot_products_double_rate()};
// Whether bf16 attention may use AMX-BF16 tiles where the CPU has them (CpuBackend::set_amx_tiles): on by
// default, and first choice (bench/RESULTS.md, Attention v8); the dot products or the fp32 products next.
inline std::atomic<bool> amx_tiles_allowed{true};
inline bool use_amx_tiles(const AttentionChunkParams& p) {
  return p.precision == Precision::bf16 && amx_tiles_allowed.load() && amx_tiles_available();
}
inline bool use_bf16_dot_products(const AttentionChunkParams& p) {
  return p.precision == Precision::bf16 && bf16_dot_products_allowed.load() && bf16_dot_products_available() &&
         !use_amx_tiles(p);
}
// The AMX layouts' inner dimension along tokens: a token tile's bf16 pairs as rows of kAmxTokenWords
// words (48 or 96 used): a product that starts at an even row group inside the tile reads whole K steps
// of 16 words past its end without leaving the row (begin/2 + ⌈n/32⌉·16 ≤ 64 for n ≤ 96 − begin).
constexpr int kAmxTokenWords = 64;
constexpr bool amx_token_rows_fit(int tokens) {
  for (int begin = 0; begin < tokens; begin += kRows)
    if (begin / 2 + (tokens - begin + 31) / 32 * kAmxWords > kAmxTokenWords) return false;
  return true;
}
static_assert(amx_token_rows_fit(kFwdKeys) && amx_token_rows_fit(kBwdQueries),
              "a key or query tile's pairs, and the K steps past them, fit in a row of kAmxTokenWords words");
inline int pairs(int K) { return (K + 1) / 2; }  // bf16 pairs of K values (the last one padded with 0)
static_assert(kFwdQueries % kPanel == 0 && kBwdKeys % kPanel == 0, "token-vector tiles must be whole panels");
static_assert(kFwdKeys % kRows == 0 && kBwdQueries % kRows == 0, "token-row tiles must be whole row groups");

constexpr float kLog2e = 1.4426950408889634f;
constexpr double kLn2 = 0.6931471805599453;
constexpr float kInf = std::numeric_limits<float>::infinity();

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline size_t round_up16(size_t n) { return (n + 15) / 16 * 16; }

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

// The calling thread's workspace, shared by the forward and the backward kernels.
inline Workspace& kernel_workspace() {
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

// Work shared by every thread of a team: task indices handed out in increasing order.
template <typename Task>
inline void run_tasks(int64_t tasks, float* scratch, size_t scratch_floats_per_thread, const Task& task) {
  std::atomic<int64_t> next{0};
#pragma omp parallel if (tasks > 1)
  {
    float* mine = scratch + static_cast<size_t>(omp_get_thread_num()) * scratch_floats_per_thread;
    for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < tasks;
         t = next.fetch_add(1, std::memory_order_relaxed))
      task(t, mine);
  }
}

// The kernels of one block, for the entry points (flash_attention.cpp), which validate p first and
// handle the empty block (no visible pair). Semantics: CpuBackend's attention_chunk_forward and
// attention_chunk_backward (cpu_backend.h).
void forward_block(float* out, float* lse, const AttentionChunkParams& p, bool accumulate);
// The forward of a block of one query row (Cq = 1, decoding): flash_attention_decode.cpp.
void forward_single_query(float* out, float* lse, const AttentionChunkParams& p, bool accumulate);
void backward_block(float* dq, float* dk, float* dv, const float* dout, const float* lse, const float* delta,
                    const AttentionChunkParams& p);

}  // namespace fpdt::kernels::cpu::flash

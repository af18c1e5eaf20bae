// The host-side decisions of the CUDA backend's cuDNN attention path (sdpa_attention.cu, cudnn_sdpa.cpp),
// free of CUDA and cuDNN types so the CPU tests check them: whether a (q chunk, kv chunk) block can go to
// cuDNN's fused attention at all, and if so the mask cuDNN is asked for — its diagonal band in the block's
// own coordinates — and the key under which the block's graphs are built once and cached. What cuDNN itself
// then refuses (a head dim, an architecture) is its answer, found when the graph is built, not decided here.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "fpdt/kernels/ops.h"

namespace fpdt::kernels::cuda {

// cuDNN's diagonal band, in block coordinates (query row i, key column j): with a right bound r, key j is
// kept iff j ≤ i + r; with a left bound l, iff j > i − l (the frontend's TOP_LEFT alignment: its
// right-bound mask keeps row + r ≥ column, its left-bound mask column + l > row). kNoBound: no such bound.
inline constexpr int64_t kNoBound = -1;

// One cuDNN SDPA shape: everything a graph is built for. q, out and dO are (B, Cq, H, D), k and v
// (B, Ck, Hkv, D), the statistics (B, H, Cq) — the strides follow from the dims.
struct SdpaKey {
  int B = 0;
  int64_t Cq = 0;
  int64_t Ck = 0;
  int H = 0;
  int Hkv = 0;
  int D = 0;
  int64_t right_bound = kNoBound;  // ≥ 0 or kNoBound
  int64_t left_bound = kNoBound;   // > 0 or kNoBound
  uint32_t scale_bits = 0;         // the fp32 softmax scale's bits (the graph bakes the value in)

  float scale() const {
    float value;
    std::memcpy(&value, &scale_bits, sizeof value);
    return value;
  }
  bool operator==(const SdpaKey& other) const {
    return B == other.B && Cq == other.Cq && Ck == other.Ck && H == other.H && Hkv == other.Hkv && D == other.D &&
           right_bound == other.right_bound && left_bound == other.left_bound && scale_bits == other.scale_bits;
  }
};

struct SdpaKeyHash {
  size_t operator()(const SdpaKey& key) const {
    size_t seed = 0;
    auto mix = [&seed](uint64_t value) { seed ^= std::hash<uint64_t>{}(value) + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2); };
    mix(static_cast<uint64_t>(key.B));
    mix(static_cast<uint64_t>(key.Cq));
    mix(static_cast<uint64_t>(key.Ck));
    mix(static_cast<uint64_t>(key.H) << 32 | static_cast<uint32_t>(key.Hkv));
    mix(static_cast<uint64_t>(key.D));
    mix(static_cast<uint64_t>(key.right_bound));
    mix(static_cast<uint64_t>(key.left_bound));
    mix(key.scale_bits);
    return seed;
  }
};

// What the cuDNN path does with a block: `refusal` empty and `key` set when it may try cuDNN, else the
// sentence that says why the CUDA-core kernel (attention.cu) runs it.
struct SdpaDecision {
  SdpaKey key;
  std::string refusal;
  bool tries_cudnn() const { return refusal.empty(); }
};

// The mask of block `p` (its positions, its window) as cuDNN's diagonal band — position_visible(q_begin + i,
// kv_begin + j, window) for every (i, j) of the block, nothing else — or a refusal:
//  - fp32 runs: cuDNN's fused attention computes on bf16 (or fp16/fp8) operands only;
//  - document masks: cuDNN would need them as ragged sequences or a bias; not wired (the CUDA-core kernel);
//  - a head dim that is not a multiple of 8, or above 256 (cuDNN's SDPA supports neither);
//  - a block in which some query row sees no key at all: cuDNN's output for such a row is not the empty
//    softmax this project's kernels agree on (out 0, LSE −inf), and the FPDT schedule never makes one on
//    the causal diagonal or below it.
// Derivation. With offset o = q_begin − kv_begin, position_visible is j ≤ i + o (causal) and, with a window
// W, i + o − j < W ⇔ j > i − (W − o). So the right bound is o and the left bound W − o, each needed only
// where it removes a pair: the right one iff some j > i + o exists (o < Ck − 1), the left one iff some
// i + o − j ≥ W does (o + Cq − 1 ≥ W). Row i's keys are then [max(0, i + o − W + 1), min(Ck − 1, i + o)]:
// row 0's upper end is ≥ 0 iff o ≥ 0, and the last row's lower end ≤ Ck − 1 iff Cq + o − W ≤ Ck − 1 (with
// a window) — both needed for no empty row (the other rows lie between).
inline SdpaDecision plan_sdpa(const AttentionChunkParams& p) {
  SdpaDecision decision;
  if (p.precision != Precision::bf16) {
    decision.refusal = "fp32 run: cuDNN's fused attention computes on bf16 operands";
    return decision;
  }
  if (p.q_doc_ids != nullptr || p.kv_doc_ids != nullptr) {
    decision.refusal = "document masks are not expressed to cuDNN";
    return decision;
  }
  if (p.D % 8 != 0 || p.D > 256) {
    decision.refusal = "head dim " + std::to_string(p.D) + ": cuDNN's SDPA needs a multiple of 8, at most 256";
    return decision;
  }
  if (p.B <= 0 || p.Cq <= 0 || p.Ck <= 0 || p.H <= 0 || p.Hkv <= 0 || p.H % p.Hkv != 0) {
    decision.refusal = "an empty block or H not a multiple of Hkv";
    return decision;
  }
  const int64_t offset = p.q_begin - p.kv_begin;
  if (offset < 0) {
    decision.refusal = "query rows before the block's first key see nothing (a block above the diagonal)";
    return decision;
  }
  if (p.window > 0 && p.Cq + offset - p.window > p.Ck - 1) {
    decision.refusal = "the sliding window leaves the last query rows no key of this block";
    return decision;
  }
  SdpaKey& key = decision.key;
  key.B = p.B;
  key.Cq = p.Cq;
  key.Ck = p.Ck;
  key.H = p.H;
  key.Hkv = p.Hkv;
  key.D = p.D;
  key.right_bound = offset < p.Ck - 1 ? offset : kNoBound;
  const bool needs_left_bound = p.window > 0 && offset + p.Cq - 1 >= p.window;
  if (needs_left_bound && p.window - offset <= 0) {  // offset ≥ W: cuDNN wants a positive left bound
    decision.refusal = "the q block lies a window or more past the kv block's start (cuDNN's left bound must be "
                       "positive)";
    return decision;
  }
  key.left_bound = needs_left_bound ? p.window - offset : kNoBound;
  const float scale = static_cast<float>(p.scale);
  std::memcpy(&key.scale_bits, &scale, sizeof scale);
  return decision;
}

// Whether cuDNN's band keeps (i, j) (the rule SdpaKey states): what the tests compare with position_visible.
constexpr bool sdpa_band_keeps(int64_t right_bound, int64_t left_bound, int64_t i, int64_t j) {
  return (right_bound == kNoBound || j <= i + right_bound) && (left_bound == kNoBound || j > i - left_bound);
}

}  // namespace fpdt::kernels::cuda

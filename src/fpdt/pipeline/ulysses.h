// The Ulysses re-layout: one all-to-all turns a chunk's sequence-sharded q, k, v — (c, Hq, D) on
// each of P ranks — into head-sharded ones — (P·c, H_r, D), the whole chunk's tokens in global
// order for rank r's heads — and a second one turns the attention output back.
// One rule for every (Hq, Hkv, P) with P ≤ Hq: rank r owns the contiguous q heads
// [r·⌊Hq/P⌋ + min(r, Hq mod P), +H_r), H_r = ⌈Hq/P⌉ for the first Hq mod P ranks and ⌊Hq/P⌋ after;
// with GQA (g = Hq/Hkv q heads per kv head) q head j reads kv head j / g. A rank receives the kv heads
// its q heads read, as K_r kv slots of G_r = H_r / K_r q heads each (its local q head i reads slot
// i / G_r, the attention kernels' uniform GQA rule): G_r is the largest run length that tiles every
// run of its q heads sharing a kv head, so a kv head whose q heads the rank holds in runs of
// different lengths arrives once per run of G_r. A kv head read by several ranks (or slots) is held
// by each, and its dK, dV are summed back over them, in (rank, slot) order. Even splits
// (Hkv % P == 0: K_r = Hkv/P) and replication (P % Hkv == 0: K_r = 1) are this rule's special cases.
// This file moves data; it does no arithmetic on it besides that summation. At P = 1 both layouts are
// the same bytes: each exchange is one copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"

namespace fpdt::pipeline {

struct HeadSharding {
  int ranks = 1;          // P
  int rank = 0;           // r, the rank this sharding's local_* fields describe
  int q_heads = 0;        // Hq
  int kv_heads = 0;       // Hkv
  int local_q_heads = 0;  // H_r = q_head_count(rank)
  int local_kv_heads = 0; // K_r = kv_slots(rank)

  int group() const { return q_heads / kv_heads; }  // g: q heads per kv head
  // Rank p's q heads [q_head_begin(p), q_head_begin(p) + q_head_count(p)).
  int q_head_begin(int p) const;
  int q_head_count(int p) const;
  // Rank p's kv slots: slot s serves its local q heads [s·G_p, (s+1)·G_p) and holds kv head kv_head_of_slot(p, s).
  int kv_slots(int p) const;
  int kv_head_of_slot(int p, int slot) const;
  // kv slots of all ranks together (Σ_p K_p): the kv heads one token sends in total.
  int kv_send_heads() const;
  int max_q_heads() const { return (q_heads + ranks - 1) / ranks; }  // ⌈Hq/P⌉
  // The attention's imbalance: the largest rank's q heads over the mean, ⌈Hq/P⌉ / (Hq/P) ≥ 1 (1: exact balance).
  double imbalance() const { return static_cast<double>(max_q_heads()) * ranks / q_heads; }
  // Elements rank `rank` sends to other ranks per local token per layer, forward (q, k, v out and the
  // attention output back): (Hq − H_r + (P−1)·H_r + 2·(Σ_p K_p − K_r))·D.
  double forward_elements_per_token(int head_dim) const;
};

// The split of every rank, ranks alike run together: "ranks 0-3: 4 q heads, 1 kv slots; ranks 4-7: 3 q
// heads, 2 kv slots" (for the run table and `fpdt plan`).
std::string describe_head_split(const HeadSharding& sharding);

// The sharding of rank `rank` of `ranks`. Throws fpdt::Error before any compute when ranks > q_heads
// (a rank would hold no head; names --sp and the head count) or when kv_heads does not divide q_heads.
HeadSharding make_head_sharding(int q_heads, int kv_heads, int ranks, int rank);

// Moves a chunk of B sequences between the layouts with per-rank counts (Communicator::all_to_all_v).
// Its buffers are compute-tier handles: packing runs through the backend's memory operations, the
// summation of the kv gradients through its embedding backward (a scatter-add of rows), so nothing here
// reads or writes memory itself.
class UlyssesExchange {
 public:
  // c: local chunk tokens per sequence. pack: compute-tier scratch of c·max(Hq, Σ_p K_p)·D floats;
  // rows: compute-tier scratch of Σ_p K_p·c int32.
  UlyssesExchange(comm::Communicator& comm, kernels::Backend& backend, const HeadSharding& sharding, int head_dim,
                  int64_t c, float* pack, int32_t* rows);

  // x (B, c, Hq, D) sequence-sharded → out (B, P·c, H_r, D) head-sharded.
  void q_to_heads(const float* x, float* out, int B);
  // x (B, P·c, H_r, D) head-sharded → out (B, c, Hq, D) sequence-sharded (attention output and dq).
  void q_to_sequence(const float* x, float* out, int B);
  // x (B, c, Hkv, D) → out (B, P·c, K_r, D), slot s of every token holding kv head kv_head_of_slot(r, s).
  void kv_to_heads(const float* x, float* out, int B);
  // Gradients: x (B, P·c, K_r, D) → out (B, c, Hkv, D) (=), every kv head the sum of its slots' gradients.
  void kv_grad_to_sequence(const float* x, float* out, int B);

 private:
  // Per-rank element counts and displacements of one sequence's exchange (arrays of P).
  struct Blocks {
    std::vector<size_t> counts, displs;
  };
  // Blocks of c·width(p)·D elements for p = 0..P−1, back to back.
  Blocks blocks_of(int (HeadSharding::*width)(int) const) const;
  // P blocks of c·width·D elements each.
  Blocks equal_blocks(int width) const;

  comm::Communicator& comm_;
  kernels::Backend& backend_;
  kernels::DeviceMemory& memory_;
  HeadSharding sharding_;
  int head_dim_;
  int64_t c_;
  float* pack_;
  int32_t* rows_;
  Blocks q_heads_, q_mine_, kv_slots_, kv_mine_;  // by rank: q heads / kv slots of rank p, and this rank's
};

}  // namespace fpdt::pipeline

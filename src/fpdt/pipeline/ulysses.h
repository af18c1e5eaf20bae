// The Ulysses re-layout: one all-to-all turns a chunk's sequence-sharded q, k, v — (c, H, D) on
// each of P ranks — into head-sharded ones — (P·c, H/P, D), the whole chunk's tokens in global
// order for this rank's heads — and a second one turns the attention output back. GQA: k and v move
// with their own head count when Hkv % P == 0 and are replicated (rank r gets kv head r / (P/Hkv))
// when P % Hkv == 0; in backward the replicated gradients are summed back. Other shapes are refused
// before any compute. This file moves data; it does no arithmetic on it besides that summation.
// At P = 1 both layouts are the same bytes: each exchange is one copy.
#pragma once

#include <cstdint>

#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"

namespace fpdt::pipeline {

struct HeadSharding {
  int ranks = 1;          // P
  int q_heads = 0;        // Hq
  int kv_heads = 0;       // Hkv
  int local_q_heads = 0;  // Hq / P, per rank after the all-to-all
  int local_kv_heads = 0; // Hkv / P, or 1 when replicated
  bool kv_replicated = false;

  // kv heads one token sends in total: Hkv, or P when replicated.
  int kv_send_heads() const { return local_kv_heads * ranks; }
  // The kv head that rank `destination` receives as its local kv head `local` (0 ≤ local < local_kv_heads).
  int kv_head_for(int destination, int local) const;
  // Elements this rank sends to other ranks per local token per layer, forward:
  // (2·Hq + 2·kv_send_heads)·D·(P−1)/P (q, k, v out and the attention output back).
  double forward_elements_per_token(int head_dim) const;
};

// Throws fpdt::Error before any compute when Hq % P ≠ 0, or when neither Hkv % P == 0 nor P % Hkv == 0.
HeadSharding make_head_sharding(int q_heads, int kv_heads, int ranks);

// Moves a chunk of B sequences between the layouts. Its buffers are compute-tier handles: packing runs
// through the backend's memory operations, the summation of replicated kv gradients through its
// embedding backward (a scatter-add of rows), so nothing here reads or writes memory itself.
class UlyssesExchange {
 public:
  // c: local chunk tokens per sequence. pack: compute-tier scratch of c·max(Hq, kv_send_heads)·D floats;
  // rows: compute-tier scratch of P·c int32 (used when kv heads are replicated).
  UlyssesExchange(comm::Communicator& comm, kernels::Backend& backend, const HeadSharding& sharding, int head_dim,
                  int64_t c, float* pack, int32_t* rows);

  // x (B, c, Hq, D) sequence-sharded → out (B, P·c, Hq/P, D) head-sharded.
  void q_to_heads(const float* x, float* out, int B);
  // x (B, P·c, Hq/P, D) head-sharded → out (B, c, Hq, D) sequence-sharded (attention output and dq).
  void q_to_sequence(const float* x, float* out, int B);
  // x (B, c, Hkv, D) → out (B, P·c, local_kv_heads, D), replicating heads when needed.
  void kv_to_heads(const float* x, float* out, int B);
  // Gradients: x (B, P·c, local_kv_heads, D) → out (B, c, Hkv, D) (=), summing replicated copies.
  void kv_grad_to_sequence(const float* x, float* out, int B);

 private:
  comm::Communicator& comm_;
  kernels::Backend& backend_;
  kernels::DeviceMemory& memory_;
  HeadSharding sharding_;
  int head_dim_;
  int64_t c_;
  float* pack_;
  int32_t* rows_;
};

}  // namespace fpdt::pipeline

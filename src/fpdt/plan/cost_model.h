// The cost model of one rank and one training step: FLOPs (model FLOPs for MFU, hardware FLOPs with
// recomputation), bytes over the host link and the network, whether prefetch hides behind compute,
// and the predicted step time. Derivations and worked numbers: docs/memory.md §8–§9.
#pragma once

#include <cstdint>

#include "fpdt/plan/config.h"
#include "fpdt/plan/hardware.h"

namespace fpdt::plan {

struct StepFlops {
  double model = 0;         // 6·(L·matmul + V·h)·T + 6·S²·q·L·B/P: the MFU convention (train::model_flops)
  double dense = 0;         // hardware FLOPs of the projections and MLPs, recomputation included
  double attention = 0;     // of attention, the largest rank's: forward 2·S²·q·B/P·imbalance per layer, backward 2.5× (flash), recompute
  double head = 0;          // of the LM head (the reference recomputes its logits in backward)
  double hardware = 0;      // dense + attention + head
};
StepFlops step_flops(const PlanConfig& config, const PlanShape& shape);

struct StepTraffic {
  double to_offload_bytes = 0;     // compute → offload tier (host link or disk)
  double from_offload_bytes = 0;   // offload → compute
  double attention_loop_to_bytes = 0;    // the part moved inside the attention loops (per block)
  double attention_loop_from_bytes = 0;
  double checkpoint_bytes = 0;     // activation checkpoints, each way (synchronous in DeepSpeed)
  double all_to_all_bytes = 0;     // sent by the busiest rank: all_to_all_elements·a·T per layer and pass
                                   // ((2q + 2kv_heads)·(P−1)/P on an even split)
  double zero_bytes = 0;           // ZeRO / data-parallel collectives, sent by one rank
};
StepTraffic step_traffic(const PlanConfig& config, const PlanShape& shape);

// The per-block race between compute and copies in the attention loops (fpdt modes with offload).
struct Prefetch {
  bool applies = false;                 // false: nothing is fetched inside the loops
  double forward_block_compute_s = 0;   // one (q chunk, kv chunk) block: 4·C·c·q FLOPs
  double forward_block_copy_s = 0;      //   vs fetching the next k, v: 2·a·kv_heads·c bytes
  double backward_block_compute_s = 0;  // 10·C·c·q FLOPs (flash backward ≈ 2.5× forward)
  double backward_block_copy_s = 0;     //   vs q, o, dO, LSE, dq in and dq out, the larger direction
  bool hides = true;
  double min_hiding_chunk_tokens = 0;   // C ≥ this hides both loops (and gives every rank a tile)
  int64_t smallest_hiding_chunk = 0;    // the smallest valid chunk for this S that hides (0: none)
};
Prefetch prefetch_analysis(const PlanConfig& config, const PlanShape& shape, const Hardware& hardware);
// The continuous bound alone (independent of S), for picking a chunk before S is known: the larger
// of the two loops' bandwidth bounds and one attention tile per rank (kMinLocalChunkTokens · P).
double min_hiding_chunk_tokens(const PlanConfig& config, const PlanShape& shape, const Hardware& hardware);

struct StepTime {
  double compute_s = 0;         // hardware FLOPs at peak · efficiency
  double all_to_all_s = 0;      // exposed: the all-to-alls sit between the layer's computations
  double copy_exposed_s = 0;    // host-link copies that compute does not hide
  double zero_exposed_s = 0;    // ZeRO traffic beyond what compute hides (it is prefetched)
  double total_s = 0;
  double mfu = 0;               // model FLOPs / (total · peak)
};
StepTime step_time(const PlanConfig& config, const PlanShape& shape, const Hardware& hardware,
                   const StepFlops& flops, const StepTraffic& traffic, const Prefetch& prefetch);

// Sustained all-to-all bandwidth of one rank among P ranks (intra-node peers over NVLink, the rest
// over the rank's network port, whichever takes longer), and of a ring collective over W ranks.
double all_to_all_bytes_per_s(const Hardware& hardware, int64_t ranks);
double collective_bytes_per_s(const Hardware& hardware, int64_t ranks);
// Bandwidth between the compute tier and the chosen offload tier (0 for none).
double offload_bytes_per_s(const PlanConfig& config, const Hardware& hardware);

}  // namespace fpdt::plan

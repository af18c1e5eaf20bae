// The cost model (see cost_model.h and docs/memory.md §8–§9).
#include "fpdt/plan/cost_model.h"

#include <algorithm>
#include <limits>

namespace fpdt::plan {

namespace {

constexpr double kFp32 = 4.0;
constexpr double kFlashBackwardFactor = 2.5;  // flash attention's backward: 5 matmuls to the forward's 2

double d(int64_t value) { return static_cast<double>(value); }

bool recomputes(const PlanConfig& config) { return config.run.recompute == Recompute::layer; }

// Inner-loop steps of the attention backward (outer kv chunk i, inner q chunk j ≥ i).
double backward_pairs(const PlanShape& s) { return d(s.u) * d(s.u + 1) / 2; }
// kv chunks fetched by one forward pass over a layer: chunk i streams the i earlier ones.
double forward_fetches(const PlanShape& s) { return d(s.u) * d(s.u - 1) / 2; }

// Bytes fetched per backward inner step, per local chunk token: the reference fetches q, o, dO and
// LSE (flash attention forms delta from o itself); ours fetches q, dO, LSE and delta (formed once in
// phase A). Both fetch dq (fp32) and write it back.
double backward_step_in_per_token(const PlanConfig& config, const PlanShape& s) {
  if (config.run.mode == Mode::fpdt_reference) return s.a * d(3 * s.q) + kFp32 * d(s.Hq + s.q);
  return s.a * d(2 * s.q) + kFp32 * d(2 * s.Hq + s.q);
}
double backward_step_out_per_token(const PlanShape& s) { return kFp32 * d(s.q); }

}  // namespace

StepFlops step_flops(const PlanConfig& config, const PlanShape& s) {
  StepFlops flops;
  const double T = d(s.T);
  const double dense_forward = 2 * d(s.matmul_params_per_layer) * d(s.L) * T;
  const double head_forward = 2 * d(s.V) * d(s.h) * T;
  // causal attention of B sequences, per rank: (QKᵀ and PV, 2 FLOPs per MAC) · S²/2 · q · B / P — the mean;
  // the largest rank of an uneven head split computes imbalance times that, and the others wait for it
  const double attention_forward = 2 * d(s.S) * d(s.S) * d(s.q) * d(s.B) / d(s.P) * d(s.L);
  flops.model = 3 * (dense_forward + head_forward + attention_forward);
  const double forwards = recomputes(config) ? 2 : 1;
  flops.dense = (forwards + 2) * dense_forward;
  flops.attention = (forwards + kFlashBackwardFactor) * attention_forward * s.imbalance;
  flops.head = (config.run.mode == Mode::fpdt_reference ? 4 : 3) * head_forward;
  flops.hardware = flops.dense + flops.attention + flops.head;
  return flops;
}

StepTraffic step_traffic(const PlanConfig& config, const PlanShape& s) {
  StepTraffic traffic;
  const double T = d(s.T), L = d(s.L), a = s.a;
  const double passes = recomputes(config) ? 3 : 2;  // forward, (recompute forward,) backward
  if (s.P > 1)
    traffic.all_to_all_bytes = L * passes * s.all_to_all_elements * a * T;
  if (s.W > 1) {
    const double N = d(s.params), share = d(s.W - 1) / d(s.W);
    const double per_param = config.run.zero == 3 ? 3 * a   // gather forward, gather backward, reduce-scatter
                             : config.run.zero >= 1 ? 2 * a  // reduce-scatter grads, all-gather weights
                                                      : 2 * a; // all-reduce
    traffic.zero_bytes = per_param * N * share;
  }
  if (config.run.offload.kind == OffloadKind::none) return traffic;

  const double h_bytes = a * d(s.h) * T;  // one (T, h) tensor
  if (config.run.mode == Mode::ulysses) {
    if (recomputes(config)) {
      traffic.checkpoint_bytes = L * h_bytes;
      traffic.to_offload_bytes = traffic.from_offload_bytes = L * h_bytes;
    }
    return traffic;
  }

  const double kv_fetch = a * d(2 * s.kv_heads) * d(s.c) * forward_fetches(s);  // one forward pass, one layer
  const double step_in = backward_step_in_per_token(config, s) * d(s.c) * backward_pairs(s);
  const double step_out = backward_step_out_per_token(s) * d(s.c) * backward_pairs(s);
  const double kv_once = a * d(2 * s.kv_heads) * T;
  const double qkvo_lse = (a * d(2 * s.q + 2 * s.kv_heads) + kFp32 * d(s.Hq)) * T;
  double to = 0, from = 0, loop_to = 0, loop_from = 0;
  if (config.run.mode == Mode::fpdt_reference) {
    // Both forward passes offload q, k, v, o, LSE and the norm output, and stream earlier k, v.
    const double pass_to = qkvo_lse + h_bytes;
    to = L * (2 * pass_to + step_out + a * d(s.q) * T) + h_bytes;           // + dO chunks; + loss input copy
    from = L * (2 * kv_fetch + kv_once + step_in + h_bytes) + h_bytes;      // + norm output back; + loss
    loop_to = L * step_out;
    loop_from = L * (2 * kv_fetch + step_in);
    traffic.checkpoint_bytes = L * h_bytes;
    to += L * h_bytes;
    from += L * h_bytes;
  } else {
    // Ours (pipeline::FpdtModel), per layer. A forward pass reads x and streams earlier k, v; it writes
    // k, v, q, o (both layouts), LSE, x_mid and the next layer's x. Phase A reads x_mid, o_local and
    // d_res, writes dO, delta and d_res; phase B is the loop; the QKV backward reads x and d_res and
    // writes d_res. recompute = layer runs the forward twice (the second one before the backward).
    const double passes = recomputes(config) ? 2 : 1;
    const double pass_to = qkvo_lse + a * d(s.q) * T + 2 * h_bytes;  // + o_local, x_mid, next x
    const double pass_from = h_bytes + kv_fetch;
    const double phase_a_from = 2 * h_bytes + a * d(s.q) * T;
    const double phase_a_to = a * d(s.q) * T + kFp32 * d(s.Hq) * T + h_bytes;
    to = L * (passes * pass_to + phase_a_to + step_out + h_bytes);
    from = L * (passes * pass_from + phase_a_from + kv_once + step_in + 2 * h_bytes);
    loop_to = L * step_out;
    loop_from = L * (passes * kv_fetch + step_in);
    traffic.checkpoint_bytes = recomputes(config) ? L * h_bytes : 0;
  }
  traffic.to_offload_bytes = to;
  traffic.from_offload_bytes = from;
  traffic.attention_loop_to_bytes = loop_to;
  traffic.attention_loop_from_bytes = loop_from;
  return traffic;
}

double offload_bytes_per_s(const PlanConfig& config, const Hardware& hardware) {
  switch (config.run.offload.kind) {
    case OffloadKind::none: return 0;
    case OffloadKind::ram: return hardware.host_link_bytes_per_s;
    case OffloadKind::disk: return hardware.disk_bytes_per_s;
  }
  return 0;
}

double min_hiding_chunk_tokens(const PlanConfig& config, const PlanShape& s, const Hardware& hardware) {
  const double bandwidth = offload_bytes_per_s(config, hardware);
  if (bandwidth <= 0) return d(kMinLocalChunkTokens * s.P);  // nothing to hide: one tile per rank
  const double flops_per_s = hardware.peak_flops(config.run.precision) * hardware.compute_efficiency;
  // forward: 4·C·c·q / F ≥ 2·a·kv_heads·c / bw;  backward: 10·C·c·q / F ≥ (in bytes per token)·c / bw
  const double forward = 2 * s.a * d(s.kv_heads) * flops_per_s / (4 * d(s.q) * bandwidth);
  const double backward = std::max(backward_step_in_per_token(config, s), backward_step_out_per_token(s)) * flops_per_s /
                          (2 * 2 * kFlashBackwardFactor * d(s.q) * bandwidth);
  return std::max({forward, backward, d(kMinLocalChunkTokens * s.P)});
}

Prefetch prefetch_analysis(const PlanConfig& config, const PlanShape& s, const Hardware& hardware) {
  Prefetch prefetch;
  const double bandwidth = offload_bytes_per_s(config, hardware);
  if (config.run.mode == Mode::ulysses || bandwidth <= 0) return prefetch;
  prefetch.applies = true;
  const double flops_per_s = hardware.peak_flops(config.run.precision) * hardware.compute_efficiency;
  const double block_flops = 4 * d(s.C) * d(s.c) * d(s.q);
  prefetch.forward_block_compute_s = block_flops / flops_per_s;
  prefetch.forward_block_copy_s = s.a * d(2 * s.kv_heads) * d(s.c) / bandwidth;
  prefetch.backward_block_compute_s = kFlashBackwardFactor * block_flops / flops_per_s;
  prefetch.backward_block_copy_s =
      std::max(backward_step_in_per_token(config, s), backward_step_out_per_token(s)) * d(s.c) / bandwidth;
  prefetch.hides = prefetch.forward_block_compute_s >= prefetch.forward_block_copy_s &&
                   prefetch.backward_block_compute_s >= prefetch.backward_block_copy_s;
  prefetch.min_hiding_chunk_tokens = min_hiding_chunk_tokens(config, s, hardware);
  prefetch.smallest_hiding_chunk = smallest_chunk_at_least(s.S, s.P, prefetch.min_hiding_chunk_tokens);
  return prefetch;
}

double all_to_all_bytes_per_s(const Hardware& hardware, int64_t ranks) {
  if (ranks <= 1) return std::numeric_limits<double>::infinity();
  const double peers = d(ranks - 1);
  const double inside = d(std::min<int64_t>(ranks, hardware.ranks_per_node) - 1) / peers;
  const double outside = 1.0 - inside;
  const double seconds_per_byte =
      std::max(inside / hardware.intra_node_bytes_per_s, outside / hardware.inter_node_bytes_per_s);
  return 1.0 / seconds_per_byte;
}

double collective_bytes_per_s(const Hardware& hardware, int64_t ranks) {
  if (ranks <= 1) return std::numeric_limits<double>::infinity();
  return ranks <= hardware.ranks_per_node ? hardware.intra_node_bytes_per_s : hardware.inter_node_bytes_per_s;
}

StepTime step_time(const PlanConfig& config, const PlanShape& s, const Hardware& hardware, const StepFlops& flops,
                   const StepTraffic& traffic, const Prefetch& prefetch) {
  StepTime time;
  const double peak = hardware.peak_flops(config.run.precision);
  const double flops_per_s = peak * hardware.compute_efficiency;
  time.compute_s = flops.hardware / flops_per_s;
  if (traffic.all_to_all_bytes > 0) time.all_to_all_s = traffic.all_to_all_bytes / all_to_all_bytes_per_s(hardware, s.P);
  if (traffic.zero_bytes > 0)
    time.zero_exposed_s = std::max(0.0, traffic.zero_bytes / collective_bytes_per_s(hardware, s.W) - time.compute_s);

  const double bandwidth = offload_bytes_per_s(config, hardware);
  if (bandwidth > 0) {
    // DeepSpeed copies activation checkpoints synchronously (ulysses, fpdt-reference): exposed.
    double exposed = config.run.mode == Mode::fpdt ? 0.0 : 2 * traffic.checkpoint_bytes / bandwidth;
    if (prefetch.applies) {
      // Inside the attention loops each block waits for the larger of its compute and its copy.
      const double L = d(s.L);
      const double forward_passes = config.run.recompute == Recompute::layer ? 2 : 1;
      exposed += L * forward_passes * forward_fetches(s) *
                 std::max(0.0, prefetch.forward_block_copy_s - prefetch.forward_block_compute_s);
      exposed += L * backward_pairs(s) *
                 std::max(0.0, prefetch.backward_block_copy_s - prefetch.backward_block_compute_s);
      // Everything else streams beside the projections and MLPs of the same layer.
      const double synchronous = config.run.mode == Mode::fpdt ? 0.0 : traffic.checkpoint_bytes;
      const double rest_to = traffic.to_offload_bytes - traffic.attention_loop_to_bytes - synchronous;
      const double rest_from = traffic.from_offload_bytes - traffic.attention_loop_from_bytes - synchronous;
      const double dense_s = (flops.dense + flops.head) / flops_per_s;
      exposed += std::max(0.0, std::max(rest_to, rest_from) / bandwidth - dense_s);
    }
    time.copy_exposed_s = exposed;
  }
  time.total_s = time.compute_s + time.all_to_all_s + time.copy_exposed_s + time.zero_exposed_s;
  time.mfu = time.total_s > 0 ? flops.model / (time.total_s * peak) : 0;
  return time;
}

}  // namespace fpdt::plan

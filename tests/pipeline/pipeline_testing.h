// Helpers shared by the pipeline's tests (and the end-to-end tests built on it): a tiny model config,
// and the FPDT pipeline run on P thread ranks with its loss, gradients and offload traffic gathered.
#pragma once

#include <mutex>
#include <vector>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/config.h"
#include "fpdt/model/transformer.h"
#include "fpdt/base/random.h"
#include "fpdt/pipeline/fpdt_model.h"

namespace fpdt::pipeline {

// A 2-layer model of the family with `heads` heads of 8 dimensions and a vocabulary of 61.
inline model::ModelConfig tiny(model::Family family, int heads, int kv_heads) {
  model::ModelConfig config = model::preset(family == model::Family::llama ? "llama-tiny" : "gpt-tiny");
  config.vocab_size = 61;
  config.hidden = 32;
  config.heads = heads;
  config.kv_heads = kv_heads;
  config.head_dim = 8;
  config.rotary_dim = 8;
  config.ffn_hidden = 48;
  config.layers = 2;
  if (family == model::Family::gpt) config.hidden = heads * config.head_dim;
  return config;
}

struct Result {
  double loss_sum = 0.0, count = 0.0;
  std::vector<float> grads;  // empty after a forward pass
  OffloadTraffic traffic;    // rank 0's
};

// Runs the pipeline on P thread ranks over `batch` — forward and backward with gradients of
// grad_scale · Σ losses, or forward only — and returns the loss and gradients summed over ranks.
inline Result run_pipeline(const model::ModelConfig& config, const RunSpec& pipeline, int ranks,
                           const model::Batch& batch, double grad_scale, uint64_t seed,
                           Pass pass = Pass::forward_backward) {
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  Result result;
  std::mutex mutex;
  comm::run_ranks(ranks, [&](comm::Communicator& comm) {
    FpdtModel model(config, *backend, comm, pipeline, seed);
    const model::LossStats stats =
        pass == Pass::forward ? model.forward(batch) : model.forward_backward(batch, grad_scale);
    double sums[2] = {stats.loss_sum, stats.count};
    comm.all_reduce_sum(sums, 2);
    if (pass == Pass::forward_backward)
      comm.all_reduce_sum(model.grads().data(), static_cast<size_t>(model.grads().numel()));
    if (comm.rank() != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    result.loss_sum = sums[0];
    result.count = sums[1];
    if (pass == Pass::forward_backward)
      result.grads.assign(model.grads().data(), model.grads().data() + model.grads().numel());
    result.traffic = model.traffic();
  });
  return result;
}

// A head layout for the uneven-sharding tests (issue 46): Hq heads, Hkv kv heads (a divisor of Hq), P ranks.
struct HeadDraw {
  int heads = 0, kv_heads = 0, ranks = 0;
};

// What a draw must show: any layout, Hq prime, Hkv = 1 (multi-query), Hkv = Hq (no GQA), or P dividing
// neither Hq nor Hkv (the case no even or replicated split covers; impossible at P = 1, then any layout).
enum class HeadCase { any, prime_heads, one_kv_head, kv_per_head, sp_divides_neither, count };

// A random layout of `head_case` with Hq ≤ 12 and P = `ranks`, or a random 2 ≤ P ≤ min(Hq, 6) when ranks is 0.
inline HeadDraw draw_heads(Rng& rng, HeadCase head_case, int ranks) {
  for (;;) {
    HeadDraw draw;
    draw.heads = 1 + static_cast<int>(rng.below(12));
    std::vector<int> divisors;
    for (int d = 1; d <= draw.heads; ++d)
      if (draw.heads % d == 0) divisors.push_back(d);
    draw.kv_heads = divisors[rng.below(divisors.size())];
    draw.ranks = ranks > 0 ? ranks : 2 + static_cast<int>(rng.below(5));
    if (draw.ranks > draw.heads) continue;
    bool prime = draw.heads > 1;
    for (int d = 2; d * d <= draw.heads; ++d) prime = prime && draw.heads % d != 0;
    const bool wanted = head_case == HeadCase::prime_heads          ? prime
                        : head_case == HeadCase::one_kv_head        ? draw.kv_heads == 1
                        : head_case == HeadCase::kv_per_head        ? draw.kv_heads == draw.heads
                        : head_case == HeadCase::sp_divides_neither ? draw.ranks == 1 || (draw.heads % draw.ranks != 0 &&
                                                                                          draw.kv_heads % draw.ranks != 0)
                                                                    : true;
    if (wanted) return draw;
  }
}

}  // namespace fpdt::pipeline

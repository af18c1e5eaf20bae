// Helpers shared by the pipeline's tests (and the end-to-end tests built on it): a tiny model config,
// and the FPDT pipeline run on P thread ranks with its loss, gradients and offload traffic gathered.
#pragma once

#include <mutex>
#include <vector>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/config.h"
#include "fpdt/model/transformer.h"
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

}  // namespace fpdt::pipeline

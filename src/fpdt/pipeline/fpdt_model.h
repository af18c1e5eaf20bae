// FPDT: the model's forward and backward over long sequences, chunk by chunk, across P
// sequence-parallel ranks, with everything of sequence length kept in the offload tier.
//
// Per sequence (B sequences run one after another; gradients accumulate):
//   forward, per layer l, per local chunk i in order: x_i → norm → q, k, v (RoPE at the chunk's
//     global positions) → all-to-all to head-sharded → attention of q_i over kv chunks 0..i merged
//     by LSE (kv j+1 prefetched while j computes) → all-to-all back → output projection → residual
//     → MLP → residual; x, x_mid, q, k, v, o (both layouts) and LSE go to the offload tier.
//   loss: the LM head and cross-entropy per chunk (never more than a chunk of logits).
//   backward, per layer in reverse: phase A, per chunk: MLP backward (its forward recomputed from
//     x_mid), output projection backward, dO to head-sharded, Δ = rowsum(dO ∘ O); phase B, the
//     paper's loop order — outer over kv chunk i, inner over q chunks j ≥ i: dK_i, dV_i accumulate
//     in the compute tier, dQ_j round-trips through the offload tier; at the end of outer step i,
//     dq_i, dk_i, dv_i go back to sequence-sharded and the QKV-projection backward of chunk i runs.
// With recompute = layer only layer inputs are kept; each layer's forward is re-run before its
// backward (the paper's activation checkpointing). Compute-tier memory is O(C·h), whatever S is.
// The pipeline moves and schedules; the arithmetic is the model's (layer.h) and the kernels'.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/layer.h"
#include "fpdt/model/transformer.h"
#include "fpdt/pipeline/chunk_plan.h"
#include "fpdt/pipeline/offload.h"
#include "fpdt/pipeline/ulysses.h"

namespace fpdt::pipeline {

enum class Recompute { none, layer };
Recompute parse_recompute(const std::string& text);

struct PipelineConfig {
  int64_t chunk_tokens = 0;  // C (global tokens per chunk); 0: use `chunks`
  int chunks = 1;            // u, when chunk_tokens is 0
  OffloadConfig offload;
  Recompute recompute = Recompute::none;
};

class FpdtModel {
 public:
  // `sp` is the sequence-parallel group; parameters are initialised from `seed` (the same on every rank).
  FpdtModel(const model::ModelConfig& config, kernels::Backend& backend, comm::Communicator& sp,
            const PipelineConfig& pipeline, uint64_t seed = 1234);
  ~FpdtModel();

  const model::ModelConfig& config() const { return config_; }
  const model::ParameterLayout& layout() const { return layout_; }
  model::ParameterBlock& params() { return params_; }
  model::ParameterBlock& grads() { return grads_; }
  const PipelineConfig& pipeline() const { return pipeline_; }
  // The plan of the last reserved sequence length (see reserve).
  const ChunkPlan& plan() const { return plan_; }

  // Lays out the offload store and the compute-tier chunk buffers for sequences of S tokens (the only
  // allocations of a step). Called implicitly when S changes.
  void reserve(int64_t seq_tokens) { reserve(seq_tokens, false); }

  // --dry-run: lays out everything a step of S tokens uses — the same compute-tier allocations as
  // reserve(), and the offload store counted in its tier without memory or files — so the memory of
  // sequences too long to compute here can be measured. A step allocates nothing beyond reserve(),
  // so this is the step's peak to the byte. The model must be reserved again before computing.
  void dry_run(int64_t seq_tokens) { reserve(seq_tokens, true); }

  // batch holds the FULL sequences (B, S) on every rank of the group; this rank computes its own
  // tokens by the chunk plan. Gradients are ACCUMULATED (+=) as the gradient of grad_scale · Σ losses
  // over this rank's tokens; they are not reduced across ranks (the trainer all-reduces them).
  // Returns this rank's loss sum and count.
  model::LossStats forward_backward(const model::Batch& batch, double grad_scale);
  model::LossStats forward(const model::Batch& batch);

 private:
  struct ChunkBuffers;
  // Arrays in the offload store (ids), per layer where noted: [layer][chunk].
  struct StoreArrays {
    int x = -1;       // layer inputs (L + 1) × u × (c, h)
    int x_mid = -1;   // stored layers × u × (c, h)
    int q = -1;       // stored layers × u × (C, Hq/P, D)
    int k = -1;       // stored layers × u × (C, Hkv/P, D)
    int v = -1;
    int o = -1;       // stored layers × u × (C, Hq/P, D)
    int o_local = -1; // stored layers × u × (c, Hq·D)
    int lse = -1;     // stored layers × u × (Hq/P, C)
    int d_res = -1;   // u × (c, h) gradient of the residual stream
    int d_o = -1;     // u × (C, Hq/P, D)
    int delta = -1;   // u × (Hq/P, C)
    int d_q = -1;     // u × (C, Hq/P, D)
  };

  void reserve(int64_t seq_tokens, bool dry);
  void layer_forward(int layer, bool write_output);
  void layer_backward(int layer);
  model::LossStats run(const model::Batch& batch, bool backward, double grad_scale);
  int stored_layer(int layer) const { return pipeline_.recompute == Recompute::layer ? 0 : layer; }
  int64_t slot(int layer_index, int chunk) const { return int64_t{layer_index} * plan_.chunks + chunk; }
  kernels::AttentionChunkParams block(int layer, const float* q, const float* k, const float* v, int q_chunk,
                                     int kv_chunk) const;

  // Store access through compute-tier staging buffers (zero-copy when the store is resident).
  const float* read(int array, int64_t slot, float* staging);
  CopyEngine::Event prefetch(int array, int64_t slot, float* staging);
  const float* ready(int array, int64_t slot, float* staging, CopyEngine::Event event);
  void write(int array, int64_t slot, const float* src);
  // Waits until no pending write still reads `buffer`; returns it for overwriting.
  float* writable(float* buffer);

  model::ModelConfig config_;
  kernels::Backend& backend_;
  comm::Communicator& sp_;
  PipelineConfig pipeline_;
  model::ParameterLayout layout_;
  model::ParameterBlock params_;
  model::ParameterBlock grads_;
  model::LayerMath math_;
  HeadSharding sharding_;

  ChunkPlan plan_;
  std::unique_ptr<OffloadStore> store_;
  std::unique_ptr<CopyEngine> copies_;
  StoreArrays arrays_;
  std::unique_ptr<ChunkBuffers> buffers_;
  std::unique_ptr<UlyssesExchange> exchange_;
  std::vector<std::pair<const float*, CopyEngine::Event>> pending_writes_;
  const int32_t* current_tokens_ = nullptr;  // (S) the sequence being computed
  bool dry_ = false;                         // the current layout is a dry run's
};

}  // namespace fpdt::pipeline

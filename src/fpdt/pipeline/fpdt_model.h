// FPDT: the model's forward and backward over long sequences, chunk by chunk, across P
// sequence-parallel ranks, with everything of sequence length kept in the offload tier.
//
// The order of work is the schedule's (schedule.h: forward per layer per chunk, the paper's backward
// loop order, prefetches, waits); this class executes it step by step. The B sequences of a
// micro-batch go through every step together: token-local maths sees B·c rows, attention blocks take
// the batch dimension, so compute-tier memory is O(B·C·h) — whatever S is — and the store holds the
// B sequences. With recompute = layer only layer inputs are kept; each layer's forward is re-run
// before its backward (the paper's activation checkpointing). Memory is the backend's (one arena and
// one store laid out by memory_layout.h); the pipeline holds handles and never touches the bytes; the
// arithmetic is the model's (layer.h) and the kernels'. The weights and gradients are the model
// states' (model_states.h): around each call the executor runs the ZeRO plan's steps and asks the
// states for the call's units, so every ZeRO stage runs this one executor.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/layer.h"
#include "fpdt/model/transformer.h"
#include "fpdt/pipeline/chunk_plan.h"
#include "fpdt/pipeline/memory_layout.h"
#include "fpdt/pipeline/model_states.h"
#include "fpdt/pipeline/offload.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/pipeline/schedule.h"
#include "fpdt/pipeline/ulysses.h"

namespace fpdt::pipeline {

// Per-token results of a pass over a batch (B, S), each in host memory, written at this rank's real
// tokens (those of its chunk plan below S); the other entries are left as they are. Null: not wanted.
struct TokenOutputs {
  float* losses = nullptr;         // (B, S) mask · cross-entropy of the token's target (0 where ignored)
  int32_t* predictions = nullptr;  // (B, S) argmax of the token's logits: the greedy next token
};

// The layout of a generation of max_new_tokens after a prompt of prompt_tokens on rank sp_rank of sp_ranks
// (FpdtModel::reserve_generation's, before anything is laid out; generation.cpp): the prompt's forward runs
// at forward_tokens (the prompt and its padding), the KV cache has cache_chunks chunks. Throws fpdt::Error
// for a cache beyond the model's learned positions or 64-bit sizes, or (unless `dry`) one in RAM beyond the
// machine's memory — so a training run that samples at its end refuses the sample before its first step.
// The layout of a pipeline of `run` for `config` on the rank `sharding` describes: layout_shape's arguments
// from the run (its recompute, precision, offload, forward-only), with `cache_chunks` of KV cache (0: none).
// Whether the store keeps the MLP's activations for the backward is run_keeps_mlp_activations(run).
LayoutShape run_layout_shape(const model::ModelConfig& config, const RunSpec& run, const HeadSharding& sharding,
                             const ChunkPlan& plan, int batch, int64_t cache_chunks = 0);
bool run_keeps_mlp_activations(const RunSpec& run);

struct GenerationLayout {
  int64_t forward_tokens = 0;
  int64_t cache_chunks = 0;
};
GenerationLayout plan_generation(const model::ModelConfig& config, const RunSpec& run, int sp_ranks, int sp_rank,
                                 int64_t prompt_tokens, int64_t max_new_tokens, bool dry);

class FpdtModel {
 public:
  // `sp` is the sequence-parallel group; `run` gives the pipeline's layout (its chunk rule, offload tier,
  // recompute, precision; resolved_layout) and whether it runs forward passes only. With model states of
  // its own (ZeRO stage 0, reduced by no one: the caller sums gradients over ranks) initialised from
  // `seed` (the same on every rank), or the trainer's, shared with its optimizer.
  FpdtModel(const model::ModelConfig& config, kernels::Backend& backend, comm::Communicator& sp, const RunSpec& run,
            uint64_t seed = 1234);
  FpdtModel(const model::ModelConfig& config, kernels::Backend& backend, comm::Communicator& sp, const RunSpec& run,
            ModelStates& states);
  ~FpdtModel();

  const model::ModelConfig& config() const { return config_; }
  const model::ParameterLayout& layout() const { return states_.layout(); }
  ModelStates& states() { return states_; }
  // The whole weights and gradients, where the ZeRO stage keeps them (model_states.h; in bf16, after
  // writing the weights, states().refresh_working_copy()).
  model::ParameterBlock& params() { return states_.weights(); }
  model::ParameterBlock& grads() { return states_.gradients(); }
  // The run's layout as the pipeline runs it (resolved_layout of the run it was given).
  const RunSpec& run() const { return run_; }
  // The plan of the last reserved sequence length (see reserve).
  const ChunkPlan& plan() const { return plan_; }

  // This rank's chunk plan for sequences of S tokens (padded_tokens − S of them are padding), and the
  // schedule of a step over them (with the batch's document ids (B, S), or none) — what
  // `fpdt train --dry-run --schedule` prints.
  ChunkPlan plan_for(int64_t seq_tokens) const;
  Schedule schedule_for(int64_t seq_tokens, Pass pass, const int32_t* doc_ids = nullptr, int batch = 1) const;
  // The memory table of micro-batches of B sequences of S tokens.
  LayoutShape layout_shape(int64_t seq_tokens, int batch, int64_t cache_chunks = 0) const;
  // Whether the store keeps the MLP's activations for the backward (keep_mlp_activations).
  bool mlp_kept() const;
  // Whether the store's activation arrays are bf16 (the precision's).
  bool bf16_store() const { return run_.precision == kernels::Precision::bf16; }

  // Lays out the offload store and the compute-tier chunk buffers for micro-batches of B sequences of
  // S tokens (the only allocations of a step). Called implicitly when S or B changes.
  void reserve(int64_t seq_tokens, int batch) { reserve(seq_tokens, batch, false); }

  // --dry-run: lays out everything a step uses — the arena and the store of reserve() counted in their
  // tiers, without memory or files — so the memory of sequences too long to compute here can be
  // measured. A step allocates nothing beyond reserve() and the model states, so this is the step's
  // peak to the byte. The model must be reserved again before computing.
  void dry_run(int64_t seq_tokens, int batch) { reserve(seq_tokens, batch, true); }

  // batch holds the FULL sequences (B, S) on every rank of the group; this rank computes its own
  // tokens by the chunk plan. Gradients are ACCUMULATED (+=) as the gradient of grad_scale · Σ losses
  // over this rank's tokens; they are not reduced across ranks (the trainer all-reduces them).
  // Returns this rank's loss sum and count; `outputs` receives this rank's per-token results.
  model::LossStats forward_backward(const model::Batch& batch, double grad_scale, const TokenOutputs& outputs = {});
  model::LossStats forward(const model::Batch& batch, const TokenOutputs& outputs = {});
  // ---- generation (generation.cpp): one sequence and its KV cache in the store's tiers ----------------
  // The prompt's forward through this pipeline (any S, its chunks, its sp ranks, its offload) with a
  // generation layout (LayoutShape::cache_chunks): every layer's k and v (after RoPE; bf16 words in a bf16
  // store) stay in the store, in chunk slots for `max_new_tokens` more positions; no LM head runs but the
  // one of the last position. logits (V, host memory) = that position's, on every rank of the group.
  // Needs a forward-only run (whole weights on every rank).
  void prefill(const std::vector<int32_t>& prompt, int64_t max_new_tokens, float* logits);
  // The token at the next position (cached_tokens()): its k and v appended to the cache, its query against
  // every cached chunk streamed through the double buffer, logits (V, host) of its next token on every rank.
  // Compute-tier memory: the prefill's arena, nothing more.
  void decode(int32_t token, float* logits);
  // Positions the cache holds (the prompt's and those decoded since), and how many it has room for.
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t cache_capacity() const;
  // --dry-run of a generation: lays out what prefill and decode use (their peaks to the byte), nothing
  // allocated.
  void dry_run_generation(int64_t prompt_tokens, int64_t max_new_tokens);

  // The bytes the last forward or forward_backward moved to and from the offload store (counted as
  // the copies were queued; schedule_traffic of its schedule). After dry_run: what a training step (a
  // forward, when laid out forward only) of the reserved shape would move without document ids.
  const OffloadTraffic& traffic() const { return traffic_; }

 private:
  void reserve(int64_t seq_tokens, int batch, bool dry, int64_t cache_chunks = 0);
  model::LossStats run(const model::Batch& batch, Pass pass, double grad_scale, const TokenOutputs& outputs);
  // The schedule's calls over the reserved layout.
  model::LossStats execute_pass(const model::Batch& batch, Pass pass, double grad_scale, const TokenOutputs& outputs);
  // The weights of the embeddings, a layer and the LM head, where the model states keep them for the call.
  model::GlobalTensors embedding_weights() const;
  model::LayerTensors layer_weights(int layer) const;
  model::GlobalTensors head_weights() const;
  // Generation (generation.cpp): lays out the forward of a prompt of S tokens and the cache of the
  // max_new_tokens after it; returns the tokens the forward runs at (the prompt and its padding).
  int64_t reserve_generation(int64_t prompt_tokens, int64_t max_new_tokens, bool dry);
  // The slot of `array` (layer, chunk) in fp32 lanes in `buffer`, now (through its bf16 twin in a bf16 store;
  // a resident fp32 slot is read in place): the first `elements` of it.
  const float* fetch_now(Array array, int layer, int chunk, Buf buffer, int64_t elements);
  // The query of position `position` (this rank's heads) against the cached k and v of `layer`, the
  // position's own k and v appended first (the rows of this rank's kv heads): o (1, H_r, D), lse.
  void attend_cache(int layer, int64_t position, const float* q, const float* k, const float* v, float* o,
                    float* lse);
  // The final norm and LM head of the last hidden state x (1, h) → logits (V, compute tier).
  void last_logits(const float* x);
  // The tensors of the current call's units, from the model states (again at a segment boundary).
  void bind_tensors();
  // Where a step's output goes: straight into a store slot, or (an all-to-all at P = 1, which only
  // copies) onto its input's memory.
  struct Placement {
    Array array = Array::count;  // count: no slot (the buffer's own arena slice)
    LayerRef layer = LayerRef::this_layer;
    int32_t chunk = -1;
    bool alias = false;          // the output is the input: nothing is copied
  };
  using StepPlacements = std::array<Placement, kMaxOperands>;  // by position in the step's signature
  void execute(const Program& program, int layer);
  void execute(const Step& step, const StepPlacements& placements, int layer, kernels::CopyEvent before_program);
  // With a resident store, each output that a later write of the program stores (the first one before
  // the buffer is produced again) is produced in its slot: the write then copies nothing; and at P = 1
  // an all-to-all's output is its input (the layouts are the same) unless the input changes while the
  // output is live, so an output stored after an all-to-all is produced in its slot before it. Writes
  // through the copy queue (ram, disk) read the buffer later, so there every output stays in its slice.
  void place_outputs(const Program& program, int layer);
  // A buffer's handle as a step reads it (a resident fetch or a placed output binds it to its store
  // slot), or as a step overwrites it (its placement, else its own arena slice).
  float* in(Buf buffer) const { return static_cast<float*>(bound_[static_cast<size_t>(buffer)]); }
  float* out(Buf buffer, const Placement& placement, int layer);
  template <typename T> T* own(Buf buffer) const { return static_cast<T*>(own_[static_cast<size_t>(buffer)]); }
  // Host → compute tier: the chunk's token ids and positions (and targets, mask); a global chunk's
  // document ids.
  void upload_inputs(int chunk, bool with_targets);
  void upload_documents(int chunk, Buf buffer);
  // The head's per-token results of local chunk `chunk` (rows (b, t)) → the batch's (B, S) outputs.
  void store_token_results(int chunk);
  // The (q chunk, kv chunk) block of `layer` (its softmax scale and sliding window).
  kernels::AttentionChunkParams block(int layer, const float* q, const float* k, const float* v, int q_chunk,
                                      int kv_chunk) const;

  model::ModelConfig config_;
  kernels::Backend& backend_;
  kernels::DeviceMemory& memory_;
  comm::Communicator& sp_;
  RunSpec run_;  // resolved_layout
  std::unique_ptr<comm::Communicator> own_world_;  // a model with states of its own: one rank
  std::unique_ptr<ModelStates> own_states_;
  ModelStates& states_;
  model::LayerMath math_;
  HeadSharding sharding_;
  std::vector<size_t> head_output_bytes_;  // (P) bytes of one token's attention output on rank p: H_p·D·4

  // The layout of the reserved shape.
  ChunkPlan plan_;
  int batch_size_ = 0;
  bool dry_ = false;
  int64_t cache_chunks_ = 0;   // a generation layout's (LayoutShape::cache_chunks), else 0
  int64_t cached_tokens_ = 0;  // positions in the KV cache (generation)
  std::unique_ptr<kernels::CopyQueue> copies_;
  std::unique_ptr<OffloadStore> store_;
  std::unique_ptr<kernels::DeviceBuffer> arena_;
  CountedBytes dry_arena_;  // a dry run's arena: counted, not allocated
  std::array<void*, kBufCount> own_{};    // each buffer's slice of the arena
  std::array<size_t, kBufCount> bytes_{}; // and the bytes it holds
  int64_t head_rows_ = 0;                 // token rows of one LM-head pass
  std::array<void*, kBufCount> bound_{};  // what a step reading the buffer reads
  std::unique_ptr<UlyssesExchange> exchange_;
  Schedule schedule_;                     // the last causal schedule, reused while plan and pass match

  // The step being executed.
  const model::Batch* batch_ = nullptr;
  bool documents_ = false;  // blocks take document ids
  double grad_scale_ = 0.0;
  TokenOutputs outputs_;
  OffloadTraffic traffic_;
  const Schedule::Call* call_ = nullptr;         // the call being executed
  int segment_ = 0;                              // and its ZeRO segment (zero_plan.h)
  model::LayerTensors weights_{}, gradients_{};  // of the call's layer
  model::GlobalTensors global_weights_{}, global_gradients_{};  // of the embedding and head calls
  std::vector<kernels::CopyEvent> events_;       // of the program's copies
  std::vector<StepPlacements> placements_;       // of the program's steps (place_outputs)
  kernels::CopyEvent last_event_ = 0;
  // Host staging of the chunk inputs (B·c rows; docs B·C).
  std::vector<int32_t> host_tokens_, host_targets_, host_position_ids_, host_docs_;
  std::vector<int32_t> padded_prompt_;    // generation: the prompt padded to the tokens its forward runs at
  std::vector<int64_t> host_positions_;
  std::vector<float> host_mask_;
  std::vector<float> host_losses_;        // the head's per-token results of a chunk (B·c rows)
  std::vector<int32_t> host_predictions_;
};

}  // namespace fpdt::pipeline

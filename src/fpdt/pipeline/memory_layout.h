// One table of the FPDT pipeline's memory: every compute-tier chunk buffer and every offload-store
// array, named, with its shape and element type, and the model states (weights, gradients, AdamW's
// moments and master weights, whole or sharded by the ZeRO stage, and ZeRO's slots) — pure functions
// of the sizes. The pipeline's reserve() and ModelStates allocate exactly these, the dry run counts
// them, `fpdt plan` (plan/memory_model.cpp) adds them up with its own element size, and the memory
// tests read them.
//
// Vocabulary (DESIGN.md §5): a chunk holds B sequences × c local tokens — rows = B·c token rows in
// (b, t) order; a head-sharded tensor (B, C, H_r, D) with C = P·c holds rank r's H_r q heads (or K_r kv
// slots, ulysses.h) of the whole chunk — as many elements as the token-sharded (B, c, Hq, D) when P divides
// Hq, and the layout is per rank when it does not. Every buffer and every store slot is rounded up to the transfer block
// (kernels::transfer_bytes), so the disk tier can move them with O_DIRECT.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fpdt/kernels/ops.h"
#include "fpdt/model/config.h"
#include "fpdt/model/parameters.h"
#include "fpdt/pipeline/chunk_plan.h"
#include "fpdt/pipeline/ulysses.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/pipeline/zero_plan.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::pipeline {

// Sizes the layout depends on. Widths are elements per token row.
struct LayoutShape {
  int64_t B = 1;               // sequences per micro-batch (run together)
  int64_t c = 0;               // local chunk tokens per sequence
  int64_t u = 1;               // chunks
  int64_t L = 1;               // layers
  int64_t stored_layers = 1;   // layers whose activations the store keeps (1 under recompute = layer)
  bool backward = true;        // laid out for backward passes; false: forward passes only (evaluation)
  int64_t cache_chunks = 0;    // generation (forward only): the KV cache — k and v keep every layer, each in
                               // cache_chunks ≥ u chunk slots (the prompt's u and those of the tokens generated
                               // after it); 0: not a generation layout
  int64_t h = 0, f = 0, V = 0, D = 0;
  int64_t q = 0;               // Hq·D
  int64_t kv = 0;              // Hkv·D (token-sharded k or v)
  int64_t local_q_heads = 0;   // H_r: this rank's q heads, ⌊Hq/P⌋ or ⌈Hq/P⌉ (ulysses.h)
  int64_t local_kv_heads = 0;  // K_r: this rank's kv slots (Hkv/P on an even split, 1 when replicated)
  int64_t P = 1;
  int64_t kv_send_heads = 0;     // Σ_p K_p: the kv slots of all ranks, what one token's k (or v) is sent as
  bool mlp_kept = false;         // the store keeps the MLP's activations for the backward (keep_mlp_activations)
  int64_t activation_bytes = 4;  // a: one stored activation (or dO) element, 4 (fp32) or 2 (bf16): the
                                 // store's and its staging buffers'; the compute tier computes in fp32 lanes in both

  bool operator==(const LayoutShape&) const = default;
  int64_t rows() const { return B * c; }                            // token rows of a chunk
  int64_t q_heads_width() const { return P * local_q_heads * D; }   // P·H_r·D per local token (= q when P | Hq)
  int64_t kv_heads_width() const { return P * local_kv_heads * D; } // P·K_r·D per local token
};

// What one element of a buffer is: a stored activation (activation_bytes: bf16 in a bf16 run, where the
// store holds the values the model rounded, layer.h — and dO, which the spec rounds before every product
// it enters, attention_chunk.h), or always fp32 (every compute-tier buffer — bf16 values sit in fp32 lanes
// there — and in the store the LSE, Δ and dQ, summed into block by block), or an index. d_res, the residual
// stream's gradient, is an activation: the model rounds it where each sublayer's backward leaves it (layer.h).
enum class Element : uint8_t { activation, fp32, fp64, int32, int64 };
int64_t element_bytes(Element element, const LayoutShape& shape);

// The compute-tier chunk buffers, in arena order. The stage buffers are the double buffer's
// (double_buffer.h): the kv chunk (forward) or the q set (backward) being computed and the one being
// prefetched. With a bf16 store (activation_bytes 2) each buffer that a bf16 array is fetched into or
// written from has a bf16 staging twin (packed_twin): the schedule packs the buffer into it before a
// write and unpacks it into the buffer after a fetch; in fp32 the twins hold nothing.
enum class Buf : uint8_t {
  // per-chunk inputs
  tokens, targets, loss_mask, positions, position_ids, q_docs, kv_docs,
  // forward
  x, x_mid, x_out, norm, norm_mean, norm_rstd, q_local, k_local, v_local, q_head, k_head, v_head,
  k_stage0, k_stage1, v_stage0, v_stage1, o_head, lse, o_local,
  mlp_norm, mlp_mean, mlp_rstd, gate, up, act, pack, exchange_rows, logits, losses, logits_lse, loss_sums,
  // backward
  d_res, d_attn, d_o_head, delta, d_k, d_v, q_stage0, q_stage1, do_stage0, do_stage1,
  lse_stage0, lse_stage1, delta_stage0, delta_stage1, dq_stage0, dq_stage1, dq_first,
  dq_local, dk_local, dv_local, d_norm, d_act, d_gate, d_up,
  // bf16 staging twins (a bf16 store only)
  x_bf16, x_out_bf16, x_mid_bf16, q_head_bf16, k_head_bf16, v_head_bf16, k_stage0_bf16, k_stage1_bf16,
  v_stage0_bf16, v_stage1_bf16, o_head_bf16, o_local_bf16, gate_bf16, up_bf16, act_bf16, q_stage0_bf16,
  q_stage1_bf16, d_o_head_bf16, do_stage0_bf16, do_stage1_bf16, d_res_bf16,
  count,
  none = 255
};
constexpr int kBufCount = static_cast<int>(Buf::count);

struct BufferSpec {
  Buf id;
  const char* name;   // "k_stage0"
  const char* shape;  // "(B, C, K_r, D)"
  Element element;
  int64_t elements;
  int64_t bytes(const LayoutShape& shape) const;  // transfer_bytes(elements · element bytes)
};
// Every buffer, in Buf order.
std::vector<BufferSpec> chunk_buffers(const LayoutShape& shape);
const char* buffer_name(Buf buffer);
// The bf16 staging twin of a buffer that bf16 arrays go through (x → x_bf16); Buf::none for the others.
Buf packed_twin(Buf buffer);

// The offload store's arrays: `layers` × u slots (layer-major), each one chunk of `elements`. The MLP's
// activations (gate, up, act) have slots only when the shape keeps them (mlp_kept).
enum class Array : uint8_t { x, x_mid, q, k, v, o, o_local, lse, gate, up, act, d_res, d_o, delta, d_q, count };
constexpr int kArrayCount = static_cast<int>(Array::count);
// What an array keeps: layer inputs (L + 1: the last is the final hidden state), a stored layer's
// activations, or the gradients of the layer in backward (dQ is summed into, so fp32; Δ is a softmax
// statistic, fp32; dO enters only products, which round it, and d_res is rounded by the model where each
// sublayer's backward leaves it, layer.h: both stored as activations).
// A layout for forward passes only keeps what a forward needs: the input of the running layer and of
// the next (2 layers, the slots of layer l at l mod 2), the running layer's k and v (for its later
// chunks), nothing else; its arena has no backward buffers. A generation layout (LayoutShape::cache_chunks)
// keeps every layer's k and v instead: the KV cache that decoding reads (pipeline/generation.cpp).
enum class StoreGroup : uint8_t { inputs, activations, gradients };

struct ArraySpec {
  Array id;
  const char* name;
  const char* shape;  // of one slot
  StoreGroup group;
  Element element;
  int64_t layers;     // L + 1 (layer inputs and the final hidden state), stored_layers, or 1; the slots of
                      // layer l are those of l mod layers (0: the array is not laid out)
  int64_t elements;   // per slot
  // Array::count: slots of its own. Else the array has none: its slot of (layer, chunk) is the slot of that
  // layer and chunk of array `in_slots_of` and of the array after it in the table, which the store lays
  // out side by side (the pair holds at least slot_bytes), and which are dead while this array is live.
  // Only dQ of the layer in backward: from its phase A's chunk i (zeroed after Δ, the last read of o and
  // o_local of chunk i) to its phase B's outer step i, o and o_local of chunk i are read by nothing.
  Array in_slots_of = Array::count;
  int64_t chunks = 0;  // slots per layer: u, or the KV cache's cache_chunks (k and v of a generation layout)
  int64_t slot_bytes(const LayoutShape& shape) const;  // transfer_bytes(elements · element bytes)
};
std::vector<ArraySpec> store_arrays(const LayoutShape& shape);
const char* array_name(Array array);
// Whether the array's elements are activation-sized (Element::activation: bf16 words in a bf16 run) —
// the activations, dO and d_res — not fp32 statistics or dQ, which is summed into.
bool stored_as_activation(Array array);

// The bytes of one stored activation element (LayoutShape::activation_bytes) in a run of `precision`.
int64_t stored_activation_bytes(kernels::Precision precision);

// The table's sizes for `config` on the plan's ranks and chunks with B sequences per chunk, keeping
// `stored_layers` layers' activations (and the MLP's too when mlp_kept), each activation element
// `activation_bytes` bytes, for backward passes or (backward false) forward passes only.
LayoutShape layout_shape(const model::ModelConfig& config, const HeadSharding& sharding, const ChunkPlan& plan,
                         int64_t batch, int64_t stored_layers, int64_t activation_bytes, bool mlp_kept = false,
                         bool backward = true);

// Whether the forward keeps the MLP's activations (gate, up, act) for the backward instead of the
// backward recomputing them from x_mid (two of the layer's GEMMs, ~15 % of its linear FLOPs; the norm
// in front of them is recomputed either way, one cheap pass): when the store is resident (offload
// none) and the attention's activations are kept (recompute none), i.e. when memory is not being
// traded for time anyway. Costs 3f·a bytes per token and layer.
bool keep_mlp_activations(bool store_resident, Recompute recompute);

// Token rows of one LM-head pass: as many as 32 MiB of fp32 logits hold, at least 1, at most rows.
int64_t head_rows(const LayoutShape& shape);

// Whether every element count, byte size and sum of the table fits int64 (checked arithmetic): false
// for a sequence so long that chunk_buffers, store_arrays and the sums below would overflow. Every
// user of the table (fpdt plan, the trainer's dry run) asks this first.
bool layout_fits_64_bits(const LayoutShape& shape);

// Σ over the table: the arena (compute tier) and the store (offload tier, or compute under --offload
// none), or one group of its arrays (an array in the slots of others adds nothing).
size_t chunk_arena_bytes(const LayoutShape& shape);
size_t store_bytes(const LayoutShape& shape, std::optional<StoreGroup> group = std::nullopt);

// One sequence-parallel rank's share of a layout: its heads (ulysses.h) and the bytes of its chunk arena
// (as allocated: rounded to the transfer block) and its store. Ranks of an uneven head split differ here only.
struct RankLayout {
  int rank = 0;
  int q_heads = 0;         // H_r
  int kv_slots = 0;        // K_r
  size_t arena_bytes = 0;  // compute tier
  size_t store_bytes = 0;  // offload tier (compute under --offload none)
};
// `shape` (any one rank's) laid out for rank `rank`'s heads of `config`.
LayoutShape layout_of_rank(LayoutShape shape, const model::ModelConfig& config, int rank);
// Every rank's share of `shape`'s run, in rank order.
std::vector<RankLayout> rank_layouts(const LayoutShape& shape, const model::ModelConfig& config);
// The rank holding the most bytes (arena + store; the lowest of equals): the one whose memory bounds the run,
// and which `fpdt plan` reports.
int largest_rank(const std::vector<RankLayout>& ranks);

// ---- model states (pipeline/model_states.h) ---------------------------------------------------------
// ZeRO over W ranks: stage ≥ 1 shards AdamW's moments (and master weights), ≥ 2 the gradients, 3 the
// weights. Each unit of the parameter layout (model/parameters.h) is sharded on its own: rank r holds
// floats [r·s, (r + 1)·s) of it, s = shard_floats(unit, W), whole 4 KiB blocks — so shards are
// transfer blocks, and the gradient norm's blocks (kShardBlockFloats) never straddle two ranks.
constexpr int64_t kShardBlockFloats = 1024;
int64_t shard_floats(int64_t unit_floats, int64_t ranks);
struct ShardRange {
  int64_t begin = 0, end = 0;  // floats from the unit's start
  int64_t size() const { return end - begin; }
};
// Rank r's part of a unit of n floats on W ranks: [r·s, (r + 1)·s) ∩ [0, n). The last ranks may hold
// less than s, or nothing.
ShardRange shard_range(int64_t unit_floats, int64_t ranks, int64_t rank);

// The model states' shape: the run they are for (resolved_layout: its ZeRO stage, optimizer offload,
// recompute (the ZeRO plan's segments), forward_only (the weights alone, stage 0) and precision (bf16: the
// weights' bf16 working copy beside them)), and the W ranks they are sharded over (partition_ranks).
struct StateShape {
  RunSpec run;
  int64_t W = 1;
};

enum class StateBuf : uint8_t {
  weights,        // whole (N), or this rank's shards (stage 3)
  gradients,      // whole, or shards (stage ≥ 2; offloaded with the optimizer)
  master,         // fp32 master weights, where the weights are not them (bf16, or an offloaded optimizer)
  m, v,           // AdamW's moments: whole, or shards (stage ≥ 1)
  slot,           // stage ≥ 2: a ZeRO slot (zero_plan.h) for gathered weights or a unit's full gradient
  weights_bf16,   // a bf16 run: the weights' bf16 words (the working copy), whole or shards as the weights
  slot_bf16,      // a bf16 run at stage 3: slot `slot`'s bf16 words, where the gathered matrices land
  vector_staging, // a bf16 run at stage 3: the gathered units' fp32 vectors (norm weights, biases), in transit
};
struct StateSpec {
  StateBuf id;
  int slot;            // slot: which; else 0
  std::string name;    // "weights (shards)", "ZeRO slot 0", ...
  Tier tier;
  int64_t elements;    // of element_bytes each (a slot: its bytes, element_bytes 1)
  int64_t element_bytes;
  int64_t bytes() const;  // transfer_bytes(elements · element_bytes)
};
// Every model-state buffer of one rank, in allocation order: weights, gradients, [master], m, v, slots,
// then a bf16 run's working copy [, its slots' bf16 words and the vector staging (stage 3)]; forward only,
// the weights [and a bf16 run's working copy].
std::vector<StateSpec> model_state_buffers(const model::ParameterLayout& layout, const StateShape& shape);
// The ZeRO plan of the layout's model (its slots are the table's).
ZeroPlan zero_plan(const model::ParameterLayout& layout, const StateShape& shape);

// A unit's fp32 vectors (norm weights, biases: the tensors that are not matrices), which a bf16 run's
// ZeRO-3 gathers in fp32 beside the unit's bf16 words (model_states.h); the embeddings' unit, read by
// lookups, is gathered whole in fp32 and has none listed. Ranges in floats from the unit's start.
std::vector<ShardRange> unit_vectors(const model::ParameterLayout& layout, int unit);
// Whether a bf16 run's ZeRO-3 gathers `unit` as bf16 words (+ its vectors): every unit but the embeddings.
bool gathers_bf16_words(int unit);
// The floats of the largest unit's vectors: one half of the vector staging (the other: this rank's part).
int64_t largest_unit_vectors(const model::ParameterLayout& layout);

}  // namespace fpdt::pipeline

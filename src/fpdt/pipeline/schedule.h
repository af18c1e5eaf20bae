// The FPDT schedule as data: a pure function of the chunk plan, the pass, the recompute mode and the
// block mask → the ordered steps of one training (or evaluation) step — fetch a store slot into a
// staging buffer, write a buffer out, wait for a copy, all-to-all, compute a block — which the
// pipeline executes one by one with no index arithmetic of its own. It can be printed
// (`fpdt train --dry-run --schedule`) and is golden-tested (tests/pipeline/schedule_test.cpp).
//
// Order (the paper's, DESIGN.md §1). Forward, per layer, per chunk i: x_i → q, k, v → all-to-all →
// attention over the live kv chunks j < i in order (kv j + 1 prefetched into the other stage while j
// computes), then the diagonal block → all-to-all back → output projection, MLP. Backward, per layer
// in reverse: phase A per chunk (MLP and output projection backward, dO, Δ, dQ zeroed); phase B outer
// over kv chunk i, inner over the live q chunks j ≥ i (the q set of the next one prefetched): dK_i and
// dV_i accumulate in the compute tier, dQ_j round-trips through the store, and after the inner loop
// chunk i's q, k, v gradients go back to sequence-sharded and its QKV projection backward runs.
// Blocks that the mask makes empty are absent: not computed, not fetched. Waits are derived, not
// written: a step that reads a buffer waits for the fetch into it; a step that overwrites a buffer
// waits for the write out of it (the copy queue is FIFO, so a fetch never overtakes a write).
//
// A layer's program is the same for every layer with the same block mask (a sliding window may differ
// by layer); it names store slots relative to its layer (this layer, or the next one's input), so the
// schedule is O(u²) steps however many layers there are. The calls are zero_plan.h's call order, so
// ZeRO's steps around each call (gather, prefetch, reduce) are the ZeRO plan's, call for call.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "fpdt/pipeline/chunk_plan.h"
#include "fpdt/pipeline/memory_layout.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/pipeline/zero_plan.h"

namespace fpdt::pipeline {

enum class Pass { forward, forward_backward };

// Which (q chunk, kv chunk) blocks of attention hold at least one visible (query, key) pair.
class BlockMask {
 public:
  BlockMask() : BlockMask(1) {}
  // Every causal block (i, j), j ≤ i, of `chunks` chunks.
  explicit BlockMask(int chunks);
  int chunks() const { return chunks_; }
  bool live(int q_chunk, int kv_chunk) const { return live_[static_cast<size_t>(q_chunk) * chunks_ + kv_chunk] != 0; }
  int live_count() const;
  bool documents() const { return documents_; }  // blocks need document ids (uploaded per block)
  int64_t window_tokens() const { return window_tokens_; }
  // "causal", "causal, window 16 tokens", "causal, documents"; then "(5 of 6 blocks)".
  std::string describe() const;
  // One line per q chunk: "q 2: kv 1 2".
  std::string describe_blocks() const;
  bool operator==(const BlockMask& other) const = default;

 private:
  friend BlockMask make_block_mask(const ChunkPlan& plan, int64_t window_tokens, const int32_t* doc_ids, int B);
  int chunks_;
  int64_t window_tokens_ = 0;
  bool documents_ = false;
  std::vector<uint8_t> live_;  // (u, u)
};

// Causal attention over the plan's global chunks, within a sliding window of `window_tokens` (a query
// at q sees keys k with q − W < k ≤ q; 0: no window) and within documents (doc_ids (B, S): a query
// sees only keys with its own id; null: no documents). Block (i, j) is live iff some query of chunk
// i sees some key of chunk j in some sequence of the batch. The diagonal is always live.
BlockMask make_block_mask(const ChunkPlan& plan, int64_t window_tokens, const int32_t* doc_ids, int B);

enum class Op : uint8_t {
  // the copy queue
  fetch,    // store slot → its buffer
  write,    // its buffer → store slot
  wait,     // compute waits for copy `copy` and every copy before it (−1: those queued before the program)
  // compute-tier bookkeeping
  zero,     // its buffer = 0
  inputs,   // the chunk's token ids and positions (with_targets: and targets, loss mask) from the batch
  docs,     // its buffer (q_docs or kv_docs) = document ids of global chunk `chunk`
  segment,  // a layer backward's halves meet: the model states' steps between them (zero_plan.h)
  // a bf16 store (memory_layout.h packed_twin): a buffer goes out and comes in through its bf16 twin
  pack,     // from a buffer to its twin, before the twin is written out
  unpack,   // from a twin to its buffer, after the fetch into the twin, before the buffer's first use
  // the Ulysses all-to-all, from one layout to the other
  q_to_heads, kv_to_heads, q_to_sequence, kv_grad_to_sequence,
  // the maths, forward
  embed,                      // the chunk's tokens → x
  attention_input,            // norm, QKV projection and RoPE: x → q, k, v (token-sharded)
  attention_block,            // block (chunk, kv_chunk) of q, k, v → o, lse; merge: into them (else overwrite)
  attention_output,           // output projection and residual: o (token-sharded), x → x_mid
  mlp,                        // x_mid → x_out (and gate, up, act, when kept for the backward)
  head,                       // x → loss; with_backward: d_res += dL/dx
  // the maths, backward
  mlp_backward,               // d_res: dL/dx_out → dL/dx_mid, from x_mid and the MLP recomputed into x_out;
                              //   from_kept: from gate, up, act as kept, only the norm recomputed
  attention_output_backward,  // o, d_res → d_attn
  attention_delta,            // dO, o → Δ
  attention_block_backward,   // q, k, v, dO, lse, Δ of block (chunk, kv_chunk) → dq +=, dk +=, dv +=
  attention_norm,             // x → the attention norm (recomputed for the QKV backward)
  attention_input_backward,   // x, dq, dk, dv → d_res += dL/dx
  embed_backward,             // d_res → embedding gradients
  count,                      // the number of ops, not an op (schedule.cpp's tables have one entry per op)
};
const char* op_name(Op op);

// The other form of an op that has two: a step is its op's plain form or, where signature(op).variant
// names one, that variant (Step::variant). Each variant belongs to one op.
enum class Variant : uint8_t {
  plain,
  with_targets,   // inputs: also the targets and the loss mask
  merge,          // attention_block: merge into o and lse (plain: overwrite them)
  with_backward,  // head: also its backward, d_res += dL/dx and the head's gradients
  from_kept,      // mlp_backward: from gate, up, act as the forward kept them (plain: the MLP recomputed)
};

// ---- each op's operands: the convention, written once ----------------------------------------------
// A step names its buffers by role. signature(op) lists the roles op has, in the order Step::buffers
// holds them, and how the step uses each (in the op's plain form and in its variant). The builder
// places a step's buffers by these names, the executor reads them by these names (OperandOf: a name
// the op lacks does not compile), and the wait derivation, the executor's output placement and the
// printed schedule read these uses.

// How a step uses one of its buffers.
enum class Role : uint8_t { none, in, out, inout };

// The roles a step's buffers play. An op has a few of them (its signature).
enum class Operand : uint8_t {
  buffer,                  // the one buffer of a fetch, write, zero or docs
  from, to,                // an all-to-all's input and output
  x, x_mid, x_out,         // the layer's input, after attention, its output
  q, k, v, o, lse,         // attention
  gate, up, act,           // the MLP's activations
  d_res,                   // the gradient along the residual stream
  d_attn, d_o, delta,      // the attention output's gradient: token-sharded, head-sharded; Δ = rowsum(dO ∘ o)
  dq, dk, dv,
};
constexpr int kMaxOperands = 9;

struct OperandSpec {
  Operand name = Operand::buffer;
  Role role = Role::none;             // how a step of the op's plain form uses it
  Role role_in_variant = Role::none;  // how a step of the op's variant uses it
  constexpr OperandSpec() = default;
  constexpr OperandSpec(Operand name_, Role role_) : OperandSpec(name_, role_, role_) {}
  constexpr OperandSpec(Operand name_, Role role_, Role role_in_variant_)
      : name(name_), role(role_), role_in_variant(role_in_variant_) {}
  bool operator==(const OperandSpec& other) const = default;
};

struct Signature {
  Variant variant = Variant::plain;  // the op's variant (plain: it has none)
  std::array<OperandSpec, kMaxOperands> operands{};
  int size = 0;
  constexpr Signature(std::initializer_list<OperandSpec> list) : Signature(Variant::plain, list) {}
  constexpr Signature(Variant variant_, std::initializer_list<OperandSpec> list)
      : variant(variant_), size(static_cast<int>(list.size())) {
    std::copy(list.begin(), list.end(), operands.begin());
  }
  // Where operand `name` is in Step::buffers; −1: the op has no such operand.
  constexpr int position(Operand name) const {
    for (int k = 0; k < size; ++k)
      if (operands[static_cast<size_t>(k)].name == name) return k;
    return -1;
  }
  constexpr const OperandSpec* begin() const { return operands.data(); }
  constexpr const OperandSpec* end() const { return operands.data() + size; }
  bool operator==(const Signature& other) const = default;
};

constexpr Signature signature(Op op) {
  using enum Operand;
  using enum Role;
  switch (op) {
    case Op::fetch: return {{buffer, out}};
    case Op::write: return {{buffer, in}};
    case Op::wait:
    case Op::segment:
    case Op::count: return {};
    case Op::inputs: return {Variant::with_targets, {}};
    case Op::zero:
    case Op::docs: return {{buffer, out}};
    case Op::pack:
    case Op::unpack:
    case Op::q_to_heads:
    case Op::kv_to_heads:
    case Op::q_to_sequence:
    case Op::kv_grad_to_sequence: return {{from, in}, {to, out}};
    case Op::embed: return {{x, out}};
    case Op::attention_input: return {{x, in}, {q, out}, {k, out}, {v, out}};
    case Op::attention_block: return {Variant::merge, {{q, in}, {k, in}, {v, in}, {o, out, inout}, {lse, out, inout}}};
    case Op::attention_output: return {{o, in}, {x, in}, {x_mid, out}};
    case Op::mlp: return {{x_mid, in}, {x_out, out}, {gate, out}, {up, out}, {act, out}};
    case Op::head: return {Variant::with_backward, {{x, in}, {d_res, none, inout}}};
    case Op::mlp_backward:
      return {Variant::from_kept,
              {{x_mid, in}, {d_res, inout}, {x_out, out, none}, {gate, none, in}, {up, none, in}, {act, none, in}}};
    case Op::attention_output_backward: return {{o, in}, {d_res, in}, {d_attn, out}};
    case Op::attention_delta: return {{d_o, in}, {o, in}, {delta, out}};
    case Op::attention_block_backward:
      return {{q, in}, {k, in}, {v, in}, {d_o, in}, {lse, in}, {delta, in}, {dq, inout}, {dk, inout}, {dv, inout}};
    case Op::attention_norm: return {{x, in}};
    case Op::attention_input_backward: return {{x, in}, {dq, inout}, {dk, inout}, {dv, inout}, {d_res, inout}};
    case Op::embed_backward: return {{d_res, in}};
  }
  return {};
}

// An operand of op `op`, by name, resolved at compile time: OperandOf<Op::mlp>(Operand::dq) does not
// compile (mlp has no dq).
template <Op op>
struct OperandOf {
  consteval OperandOf(Operand name) : position(signature(op).position(name)) {
    if (position < 0) throw "this op has no operand of that name";  // not a constant: a compile error
  }
  int position;
};

// Which layer a fetch or write names: the program's layer l, or l + 1 (a layer's output is the next
// layer's input). Arrays that keep one layer (gradients; everything under recompute = layer) ignore it.
enum class LayerRef : uint8_t { this_layer, next_layer };

struct Step {
  Op op;
  Variant variant = Variant::plain;    // plain, or signature(op).variant
  Array array = Array::count;          // fetch, write
  LayerRef layer = LayerRef::this_layer;
  int32_t chunk = -1;                  // token-local steps: the chunk; attention: the q chunk
  int32_t kv_chunk = -1;               // attention blocks
  int32_t copy = -1;                   // fetch, write: its number among the program's copies; wait: see Op
  Buf buffers[kMaxOperands] = {Buf::none, Buf::none, Buf::none, Buf::none, Buf::none,
                               Buf::none, Buf::none, Buf::none, Buf::none};  // in signature(op) order
  // The buffer playing `name` (Buf::none: not given); the op must have it.
  Buf buffer(Operand name) const;
};
// How `step` uses its buffer at `position` (of its signature; none past it).
Role operand_role(const Step& step, int position);
std::string describe_step(const Step& step);

struct Program {
  std::string name;       // "embed", "layer forward", "head", "layer backward", "embed backward"
  int mask = -1;          // layer programs: the index of their block mask in Schedule::masks
  std::vector<Step> steps;
  int copies = 0;         // fetches and writes it queues
};

struct Schedule {
  ChunkPlan plan;
  int layers = 0;
  Pass pass = Pass::forward_backward;
  Recompute recompute = Recompute::none;
  bool mlp_kept = false;  // the forward writes the MLP's activations to the store; the backward reads them
  bool bf16_store = false;  // the activation arrays are bf16: they go through the buffers' bf16 twins
  bool kv_cache = false;    // the forward writes every chunk's k and v (generation's KV cache)
  std::vector<BlockMask> masks;  // the distinct masks of the layers (layers with equal masks share programs)
  std::vector<Program> programs;
  struct Call {
    int program;  // index into programs
    int layer;    // the layer its slots are relative to
    CallKind kind;
  };
  std::vector<Call> calls;  // in order: call_order(layers, pass)
  // The header, the masks, the calls, and every program once, one step per line.
  std::string describe() const;
};

// layer_masks: the block mask of each layer (their count is the number of layers); layers whose masks
// are equal (e.g. all but the sliding-window ones) run the same layer programs. mlp_kept (recompute
// none only; keep_mlp_activations): the MLP's activations go through the store instead of being
// recomputed in the backward. bf16_store: the activation-sized arrays (stored_as_activation) are bf16,
// so each write of one is a pack into the buffer's twin and a write of the twin, each fetch of one a fetch
// into the twin and an unpack into the buffer right before the buffer's first use (its waits derived).
// kv_cache (a forward of a generation layout, memory_layout.h): every chunk's k and v are written to the
// store, not only those a later chunk or the backward reads — the KV cache decoding reads — and the head
// program is empty (generation wants the last position's logits alone).
Schedule make_schedule(const ChunkPlan& plan, Pass pass, Recompute recompute,
                       const std::vector<BlockMask>& layer_masks, bool mlp_kept = false, bool bf16_store = false,
                       bool kv_cache = false);

// The copies a schedule queues over all its calls: fetches and writes of each store array (a bf16
// store's pack and unpack move nothing more).
struct ScheduleCopies {
  std::array<int64_t, kArrayCount> fetches{}, writes{};  // by Array
  bool operator==(const ScheduleCopies&) const = default;
};
ScheduleCopies count_copies(const Schedule& schedule);
// The same count for make_schedule(plan, pass, recompute, masks, mlp_kept, *, kv_cache) over the masks of
// make_block_mask(plan, window, no documents) of each layer's window (0: none), without building it: a
// layer's programs copy per chunk, per off-diagonal live block, and per kv chunk a later q chunk sees
// (layer_forward's and layer_backward's loops, summed in closed form; tests/pipeline/schedule_test.cpp
// holds the two equal). O(L + u log u) per window where the schedule is O(u²): a dry run's traffic at
// any number of chunks.
ScheduleCopies count_copies(const ChunkPlan& plan, Pass pass, Recompute recompute,
                            const std::vector<int64_t>& layer_windows, bool mlp_kept, bool kv_cache = false);

}  // namespace fpdt::pipeline

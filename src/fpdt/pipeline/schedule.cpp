// The FPDT schedule (see schedule.h): the block mask, the programs and their text.
#include "fpdt/pipeline/schedule.h"

#include <algorithm>
#include <array>
#include <climits>
#include <map>

#include "fpdt/base/error.h"
#include "fpdt/kernels/ops.h"
#include "fpdt/pipeline/double_buffer.h"

namespace fpdt::pipeline {

// ---- the block mask ----------------------------------------------------------------------------------

BlockMask::BlockMask(int chunks) : chunks_(chunks), live_(static_cast<size_t>(chunks) * chunks, 0) {
  for (int i = 0; i < chunks; ++i)
    for (int j = 0; j <= i; ++j) live_[static_cast<size_t>(i) * chunks + j] = 1;
}

int BlockMask::live_count() const { return static_cast<int>(std::count(live_.begin(), live_.end(), 1)); }

std::string BlockMask::describe() const {
  std::string text = "causal";
  if (window_tokens_ > 0) text += ", window " + std::to_string(window_tokens_) + " tokens";
  if (documents_) text += ", documents";
  return text + " (" + std::to_string(live_count()) + " of " + std::to_string(chunks_ * (chunks_ + 1) / 2) +
         " causal blocks live)";
}

std::string BlockMask::describe_blocks() const {
  std::string text;
  for (int i = 0; i < chunks_; ++i) {
    text += "q " + std::to_string(i) + ": kv";
    for (int j = 0; j <= i; ++j)
      if (live(i, j)) text += " " + std::to_string(j);
    text += "\n";
  }
  return text;
}

namespace {

// Per sequence and chunk: each document id present → its first and last global position in the chunk.
using DocumentSpans = std::map<int32_t, std::pair<int64_t, int64_t>>;

DocumentSpans document_spans(const ChunkPlan& plan, const int32_t* doc_ids, int chunk) {
  DocumentSpans spans;
  const int64_t begin = plan.chunk_begin(chunk), end = std::min(begin + plan.chunk_tokens, plan.seq_tokens);
  for (int64_t position = begin; position < end; ++position) {
    auto [it, added] = spans.try_emplace(doc_ids[position], position, position);
    if (!added) it->second.second = position;
  }
  return spans;
}

// Whether some real query of global chunk i sees some real key of chunk j, by position and window (a
// chunk of padding only, when more chunks were asked for than the tokens fill, has no real token: only
// its diagonal stays live, so that its padding rows see themselves).
bool causal_block_live(const ChunkPlan& plan, int64_t window_tokens, int i, int j) {
  const int64_t C = plan.chunk_tokens;
  auto real = [&](int chunk) { return std::clamp<int64_t>(plan.seq_tokens - chunk * C, 0, C); };
  return kernels::block_has_visible_pair(i * C, real(i), j * C, real(j), window_tokens);
}

}  // namespace

BlockMask make_block_mask(const ChunkPlan& plan, int64_t window_tokens, const int32_t* doc_ids, int B) {
  if (window_tokens < 0)
    throw Error("pipeline", "the attention window must be positive, got " + std::to_string(window_tokens) + " tokens");
  BlockMask mask(plan.chunks);
  mask.window_tokens_ = window_tokens;
  mask.documents_ = doc_ids != nullptr;
  const int u = plan.chunks;
  for (int i = 0; i < u; ++i)
    for (int j = 0; j < i; ++j) mask.live_[static_cast<size_t>(i) * u + j] = causal_block_live(plan, window_tokens, i, j);
  if (doc_ids == nullptr) return mask;

  std::vector<uint8_t> live(mask.live_.size(), 0);
  for (int b = 0; b < B; ++b) {
    const int32_t* sequence = doc_ids + static_cast<int64_t>(b) * plan.seq_tokens;
    std::vector<DocumentSpans> spans;
    for (int i = 0; i < u; ++i) spans.push_back(document_spans(plan, sequence, i));
    for (int i = 0; i < u; ++i)
      for (int j = 0; j < i; ++j) {
        if (!mask.live_[static_cast<size_t>(i) * u + j]) continue;  // out of the window
        // Off the diagonal every key precedes every query: the closest pair of a document is its first
        // query in chunk i and its last key in chunk j.
        for (const auto& [document, queries] : spans[i]) {
          const auto keys = spans[j].find(document);
          if (keys != spans[j].end() && kernels::position_visible(queries.first, keys->second.second, window_tokens)) {
            live[static_cast<size_t>(i) * u + j] = 1;
            break;
          }
        }
      }
  }
  for (int i = 0; i < u; ++i) live[static_cast<size_t>(i) * u + i] = 1;  // a query sees itself
  mask.live_ = std::move(live);
  return mask;
}

// ---- steps and their roles ---------------------------------------------------------------------------

namespace {
constexpr int kOps = static_cast<int>(Op::count);

// Each op's name, in the order of Op (checked below).
constexpr struct {
  Op op;
  const char* name;
} kOpNames[] = {
    {Op::fetch, "fetch"},
    {Op::write, "write"},
    {Op::wait, "wait"},
    {Op::zero, "zero"},
    {Op::inputs, "inputs"},
    {Op::docs, "docs"},
    {Op::segment, "segment (model states)"},
    {Op::pack, "pack bf16"},
    {Op::unpack, "unpack bf16"},
    {Op::q_to_heads, "all-to-all q to heads"},
    {Op::kv_to_heads, "all-to-all kv to heads"},
    {Op::q_to_sequence, "all-to-all q to sequence"},
    {Op::kv_grad_to_sequence, "all-to-all kv grad to sequence"},
    {Op::embed, "embed"},
    {Op::attention_input, "norm + qkv + rope"},
    {Op::attention_block, "attention block"},
    {Op::attention_output, "out proj"},
    {Op::mlp, "mlp"},
    {Op::head, "head + loss"},
    {Op::mlp_backward, "mlp backward"},
    {Op::attention_output_backward, "out proj backward"},
    {Op::attention_delta, "delta"},
    {Op::attention_block_backward, "attention block backward"},
    {Op::attention_norm, "norm"},
    {Op::attention_input_backward, "qkv backward"},
    {Op::embed_backward, "embed backward"},
};
constexpr bool op_names_in_order() {
  for (int op = 0; op < kOps; ++op)
    if (kOpNames[op].op != static_cast<Op>(op)) return false;
  return true;
}
static_assert(static_cast<int>(std::size(kOpNames)) == kOps && op_names_in_order(),
              "kOpNames: one name per op, in the order of Op");

// Every op's signature fits Step::buffers and names each role once; an operand's use differs in the
// variant only where the op has one, and no two ops have the same variant.
constexpr bool signatures_are_well_formed() {
  for (int op = 0; op < kOps; ++op) {
    const Signature operands = signature(static_cast<Op>(op));
    if (operands.size > kMaxOperands) return false;
    for (int k = 0; k < operands.size; ++k) {
      const OperandSpec& operand = operands.operands[static_cast<size_t>(k)];
      if (operands.position(operand.name) != k) return false;
      if (operand.role != operand.role_in_variant && operands.variant == Variant::plain) return false;
    }
    for (int other = 0; other < op; ++other)
      if (operands.variant != Variant::plain && signature(static_cast<Op>(other)).variant == operands.variant)
        return false;
  }
  return true;
}
static_assert(signatures_are_well_formed(),
              "an op's signature names a role twice, has too many, or its variant is wrong (schedule.h)");

// What the printed step says of its variant (a merge shows already: its o and lse are o+ and lse+).
const char* variant_note(Variant variant) {
  switch (variant) {
    case Variant::with_targets: return " (with targets)";
    case Variant::with_backward: return " (with backward)";
    case Variant::from_kept: return " (kept activations)";
    case Variant::plain:
    case Variant::merge: return "";
  }
  return "";
}
}  // namespace

const char* op_name(Op op) { return op < Op::count ? kOpNames[static_cast<int>(op)].name : "?"; }

Buf Step::buffer(Operand name) const {
  const int position = signature(op).position(name);
  FPDT_ASSERT(position >= 0);  // the op has no operand of that name
  return buffers[position];
}

Role operand_role(const Step& step, int position) {
  const Signature operands = signature(step.op);
  if (position >= operands.size) return Role::none;
  const OperandSpec& operand = operands.operands[static_cast<size_t>(position)];
  return step.variant == Variant::plain ? operand.role : operand.role_in_variant;
}

std::string describe_step(const Step& step) {
  std::string text = op_name(step.op);
  if (step.op == Op::wait)
    return text + (step.copy < 0 ? " copies before this program" : " #" + std::to_string(step.copy));
  if (step.op == Op::fetch || step.op == Op::write) {
    const std::string slot = std::string(array_name(step.array)) + "[" +
                             (step.layer == LayerRef::next_layer ? "l+1, " : "l, ") + std::to_string(step.chunk) + "]";
    const std::string buffer = buffer_name(step.buffers[0]);
    return text + " " + (step.op == Op::fetch ? slot + " -> " + buffer : buffer + " -> " + slot) + " #" +
           std::to_string(step.copy);
  }
  if (step.chunk >= 0) {
    text += " " + std::to_string(step.chunk);
    if (step.kv_chunk >= 0) text += "," + std::to_string(step.kv_chunk);
  }
  std::string reads, writes;
  for (int k = 0; k < kMaxOperands; ++k) {
    const Role role = operand_role(step, k);
    if (role == Role::none || step.buffers[k] == Buf::none) continue;
    std::string& list = role == Role::in ? reads : writes;
    list += std::string(" ") + buffer_name(step.buffers[k]) + (role == Role::inout ? "+" : "");
  }
  if (!reads.empty()) text += ":" + reads;
  if (!writes.empty()) text += " ->" + writes;
  return text + variant_note(step.variant);
}

// ---- the programs --------------------------------------------------------------------------------------

namespace {

// A buffer in the role `name` of an op-`op` step (a role the op lacks does not compile).
template <Op op>
struct Named {
  OperandOf<op> name;
  Buf buffer;
};
constexpr int kFetched = OperandOf<Op::fetch>(Operand::buffer).position;
constexpr int kWritten = OperandOf<Op::write>(Operand::buffer).position;

// Appends steps to one program, deriving its waits (see schedule.h) from the copies it has queued.
class Builder {
 public:
  // bf16_store: the activation arrays go through the buffers' bf16 twins (make_schedule).
  Builder(Program& program, bool bf16_store) : program_(program), bf16_store_(bf16_store) {
    pending_fetch_.fill(-1);
    pending_write_.fill(kBeforeProgram);
    pending_unpack_.fill(-1);
  }

  void fetch(Array array, LayerRef layer, int chunk, Buf buffer) {
    if (packs(array)) {  // into the twin; unpacked into the buffer before its first use
      pending_unpack_[index(buffer)] = chunk;
      buffer = packed_twin(buffer);
    }
    FPDT_ASSERT(pending_fetch_[index(buffer)] < 0);  // a fetch is consumed before the next into the buffer
    Step step{Op::fetch};
    step.array = array;
    step.layer = layer;
    step.chunk = chunk;
    step.buffers[kFetched] = buffer;
    step.copy = program_.copies++;
    pending_fetch_[index(buffer)] = step.copy;
    program_.steps.push_back(step);
  }

  void write(Buf buffer, Array array, LayerRef layer, int chunk) {
    if (packs(array)) {
      compute<Op::pack>(chunk, {{Operand::from, buffer}, {Operand::to, packed_twin(buffer)}});
      buffer = packed_twin(buffer);
    }
    unpack_before(buffer);
    Step step{Op::write};
    step.array = array;
    step.layer = layer;
    step.chunk = chunk;
    step.buffers[kWritten] = buffer;
    settle(step);
    step.copy = program_.copies++;
    pending_write_[index(buffer)] = step.copy;
    program_.steps.push_back(step);
  }

  // A compute step of `op`, its buffers by role: b.compute<Op::attention_delta>(i, {{d_o, ...}, {o, ...}, ...});
  // `variant`: plain or the op's.
  template <Op op>
  void compute(int chunk, std::initializer_list<Named<op>> operands, Variant variant = Variant::plain,
               int kv_chunk = -1) {
    FPDT_ASSERT(variant == Variant::plain || variant == signature(op).variant);
    for (const Named<op>& operand : operands) unpack_before(operand.buffer);
    Step step{op};
    step.variant = variant;
    step.chunk = chunk;
    step.kv_chunk = kv_chunk;
    for (const Named<op>& operand : operands) step.buffers[operand.name.position] = operand.buffer;
    settle(step);
    for (int k = 0; k < kMaxOperands; ++k)
      if (operand_role(step, k) != Role::none && step.buffers[k] != Buf::none)
        pending_fetch_[index(step.buffers[k])] = -1;  // consumed (or overwritten)
    program_.steps.push_back(step);
  }

 private:
  static constexpr int kBeforeProgram = INT_MIN;
  static size_t index(Buf buffer) { return static_cast<size_t>(buffer); }

  bool packs(Array array) const { return bf16_store_ && stored_as_activation(array); }

  // A buffer whose data was fetched into its bf16 twin is unpacked from it before any step uses it.
  void unpack_before(Buf buffer) {
    if (buffer == Buf::none || pending_unpack_[index(buffer)] < 0) return;
    const int chunk = pending_unpack_[index(buffer)];
    pending_unpack_[index(buffer)] = -1;
    compute<Op::unpack>(chunk, {{Operand::from, packed_twin(buffer)}, {Operand::to, buffer}});
  }

  // Emits the wait `step` needs — for the fetches into what it reads and the writes out of what it
  // overwrites — as one wait for the latest of them (the queue is FIFO).
  void settle(const Step& step) {
    int latest = -1;
    bool before = false;
    for (int k = 0; k < kMaxOperands; ++k) {
      const Role role = operand_role(step, k);
      if (role == Role::none || step.buffers[k] == Buf::none) continue;
      const size_t b = index(step.buffers[k]);
      if (pending_fetch_[b] > done_) latest = std::max(latest, pending_fetch_[b]);
      if (role == Role::in) continue;
      if (pending_write_[b] == kBeforeProgram && !before_done_) before = true;
      if (pending_write_[b] > done_) latest = std::max(latest, pending_write_[b]);
    }
    if (latest >= 0 || before) wait(latest);
  }

  void wait(int copy) {
    Step step{Op::wait};
    step.copy = copy;
    program_.steps.push_back(step);
    before_done_ = true;  // FIFO: whatever this waits for, every copy queued before the program is done
    done_ = std::max(done_, copy);
  }

  Program& program_;
  bool bf16_store_;
  std::array<int, kBufCount> pending_unpack_;  // the chunk fetched into the buffer's twin, not yet unpacked
  std::array<int, kBufCount> pending_fetch_;  // copy number of a fetch into the buffer not yet waited for
  std::array<int, kBufCount> pending_write_;  // copy number of the last write out of the buffer
  int done_ = -1;                             // every copy ≤ this has finished
  bool before_done_ = false;                  // the copies queued before the program have finished
};

// The MLP's activations the backward reads (Op::mlp's gate, up, act), their buffers and store arrays.
constexpr Buf kMlpBuffers[3] = {Buf::gate, Buf::up, Buf::act};
constexpr Array kMlpArrays[3] = {Array::gate, Array::up, Array::act};

// What a layer's forward writes to the store.
struct ForwardWrites {
  bool activations;  // q, o, LSE, o (token-sharded), x_mid: what the backward reads
  bool kv_kept;      // every chunk's k and v, whatever reads them later (the backward, a KV cache)
  bool output;       // x of the next layer
  bool mlp;          // the MLP's activations
};
// A layer forward's: what the backward reads unless it re-runs the layer (recompute none), the MLP's
// activations when they are kept (mlp_kept: for a backward), every k and v for a KV cache (kv_cache).
ForwardWrites layer_forward_writes(bool backward, Recompute recompute, bool mlp_kept, bool kv_cache) {
  const bool keep = backward && recompute == Recompute::none;
  return {.activations = keep, .kv_kept = keep || kv_cache, .output = true, .mlp = mlp_kept};
}
// A backward that re-runs its layer's forward first (recompute layer): what its loops read, no output.
constexpr ForwardWrites kRecomputedForwardWrites{.activations = true, .kv_kept = true, .output = false,
                                                 .mlp = false};

void layer_forward(Builder& b, const BlockMask& mask, const ForwardWrites& writes) {
  using enum Operand;
  const int u = mask.chunks();
  const LayerRef l = LayerRef::this_layer;
  auto live_before = [&](int i) {  // live kv chunks before the diagonal of q chunk i
    std::vector<int> kv;
    for (int j = 0; j < i; ++j)
      if (mask.live(i, j)) kv.push_back(j);
    return kv;
  };
  bool first_kv_fetched = false;  // chunk i's first kv block, fetched during chunk i − 1
  for (int i = 0; i < u; ++i) {
    const std::vector<int> kv = live_before(i);
    bool kv_needed = writes.kv_kept;  // or by a later q chunk of this layer
    for (int later = i + 1; later < u; ++later) kv_needed = kv_needed || mask.live(later, i);

    b.compute<Op::inputs>(i, {});
    if (i == 0) b.fetch(Array::x, l, i, Buf::x);  // later chunks' inputs are prefetched below
    b.compute<Op::attention_input>(i, {{x, Buf::x}, {q, Buf::q_local}, {k, Buf::k_local}, {v, Buf::v_local}});
    b.compute<Op::q_to_heads>(i, {{from, Buf::q_local}, {to, Buf::q_head}});
    b.compute<Op::kv_to_heads>(i, {{from, Buf::k_local}, {to, Buf::k_head}});
    b.compute<Op::kv_to_heads>(i, {{from, Buf::v_local}, {to, Buf::v_head}});
    if (kv_needed) {
      b.write(Buf::k_head, Array::k, l, i);
      b.write(Buf::v_head, Array::v, l, i);
    }
    if (mask.documents()) b.compute<Op::docs>(i, {{buffer, Buf::q_docs}});
    if (!kv.empty() && !first_kv_fetched) {
      b.fetch(Array::k, l, kv[0], kStages[0].k);
      b.fetch(Array::v, l, kv[0], kStages[0].v);
    }
    for (size_t n = 0; n < kv.size(); ++n) {
      const Stage& stage = stage_of(n);
      if (n + 1 < kv.size()) {
        b.fetch(Array::k, l, kv[n + 1], stage_of(n + 1).k);
        b.fetch(Array::v, l, kv[n + 1], stage_of(n + 1).v);
      }
      if (mask.documents()) b.compute<Op::docs>(kv[n], {{buffer, Buf::kv_docs}});
      b.compute<Op::attention_block>(
          i, {{q, Buf::q_head}, {k, stage.k}, {v, stage.v}, {o, Buf::o_head}, {lse, Buf::lse}},
          n > 0 ? Variant::merge : Variant::plain, kv[n]);
    }
    // The stages are free: the next chunk's first kv block loads behind this chunk's diagonal block,
    // output projection and MLP and the next chunk's QKV, instead of in front of its first block.
    const std::vector<int> next_kv = i + 1 < u ? live_before(i + 1) : std::vector<int>{};
    first_kv_fetched = !next_kv.empty();
    if (first_kv_fetched) {
      b.fetch(Array::k, l, next_kv[0], kStages[0].k);
      b.fetch(Array::v, l, next_kv[0], kStages[0].v);
    }
    if (mask.documents()) b.compute<Op::docs>(i, {{buffer, Buf::kv_docs}});
    b.compute<Op::attention_block>(
        i, {{q, Buf::q_head}, {k, Buf::k_head}, {v, Buf::v_head}, {o, Buf::o_head}, {lse, Buf::lse}},
        kv.empty() ? Variant::plain : Variant::merge, i);
    if (writes.activations) {
      b.write(Buf::q_head, Array::q, l, i);
      b.write(Buf::o_head, Array::o, l, i);
      b.write(Buf::lse, Array::lse, l, i);
    }
    b.compute<Op::q_to_sequence>(i, {{from, Buf::o_head}, {to, Buf::o_local}});
    if (writes.activations) b.write(Buf::o_local, Array::o_local, l, i);
    b.compute<Op::attention_output>(i, {{o, Buf::o_local}, {x, Buf::x}, {x_mid, Buf::x_mid}});
    if (i + 1 < u) b.fetch(Array::x, l, i + 1, Buf::x);  // x is free: the next input loads while the MLP runs
    if (writes.activations) b.write(Buf::x_mid, Array::x_mid, l, i);
    if (!writes.output) continue;  // recomputed for the backward, which re-runs the MLP from x_mid itself
    if (writes.mlp) {
      b.compute<Op::mlp>(i, {{x_mid, Buf::x_mid}, {x_out, Buf::x_out}, {gate, kMlpBuffers[0]}, {up, kMlpBuffers[1]},
                             {act, kMlpBuffers[2]}});
      for (int k = 0; k < 3; ++k) b.write(kMlpBuffers[k], kMlpArrays[k], l, i);
    } else {
      b.compute<Op::mlp>(i, {{x_mid, Buf::x_mid}, {x_out, Buf::x_out}});
    }
    b.write(Buf::x_out, Array::x, LayerRef::next_layer, i);
  }
}

// On entry the store's d_res holds dL/dx_out of the layer for every chunk; on exit dL/dx_in.
// mlp_kept: the MLP's activations are fetched (chunk i + 1's while chunk i computes), not recomputed.
void layer_backward(Builder& b, const BlockMask& mask, bool mlp_kept) {
  using enum Operand;
  const int u = mask.chunks();
  const LayerRef l = LayerRef::this_layer;
  // Phase A, per chunk: MLP and output projection backward; dO to head-sharded; Δ; dQ zeroed. Each
  // input of chunk i + 1 is fetched as soon as chunk i is done with its buffer.
  b.fetch(Array::d_res, l, 0, Buf::d_res);
  b.fetch(Array::x_mid, l, 0, Buf::x_mid);
  b.fetch(Array::o_local, l, 0, Buf::o_local);
  b.fetch(Array::o, l, 0, Buf::o_head);
  auto fetch_mlp = [&](int chunk) {
    for (int k = 0; k < 3 && mlp_kept; ++k) b.fetch(kMlpArrays[k], l, chunk, kMlpBuffers[k]);
  };
  fetch_mlp(0);
  for (int i = 0; i < u; ++i) {
    const bool next = i + 1 < u;
    if (mlp_kept) {
      b.compute<Op::mlp_backward>(i,
                                  {{x_mid, Buf::x_mid}, {d_res, Buf::d_res}, {gate, kMlpBuffers[0]},
                                   {up, kMlpBuffers[1]}, {act, kMlpBuffers[2]}},
                                  Variant::from_kept);
      if (next) fetch_mlp(i + 1);
    } else {
      b.compute<Op::mlp_backward>(i, {{x_mid, Buf::x_mid}, {d_res, Buf::d_res}, {x_out, Buf::x_out}});
    }
    if (next) b.fetch(Array::x_mid, l, i + 1, Buf::x_mid);
    b.compute<Op::attention_output_backward>(i, {{o, Buf::o_local}, {d_res, Buf::d_res}, {d_attn, Buf::d_attn}});
    if (next) b.fetch(Array::o_local, l, i + 1, Buf::o_local);
    b.write(Buf::d_res, Array::d_res, l, i);
    if (next) b.fetch(Array::d_res, l, i + 1, Buf::d_res);
    b.compute<Op::q_to_heads>(i, {{from, Buf::d_attn}, {to, Buf::d_o_head}});
    b.write(Buf::d_o_head, Array::d_o, l, i);
    b.compute<Op::attention_delta>(i, {{d_o, Buf::d_o_head}, {o, Buf::o_head}, {delta, Buf::delta}});
    if (next) b.fetch(Array::o, l, i + 1, Buf::o_head);
    b.write(Buf::delta, Array::delta, l, i);
    b.compute<Op::zero>(i, {{buffer, Buf::dq_first}});
    b.write(Buf::dq_first, Array::d_q, l, i);
  }
  // The output projection's and MLP's gradients are final; phase B reads the layer's other weights.
  b.compute<Op::segment>(-1, {});
  // Phase B: outer kv chunk i, inner live q chunks j ≥ i (the diagonal first: its dq is final last).
  // kv chunk i's k, v and its first q set (its own chunk: the diagonal) go to stage 0; they load during
  // chunk i − 1's QKV backward, dq last, once chunk i − 1 has moved its dq out of dq_first.
  auto fetch_first = [&](int i, bool dq_only) {
    if (!dq_only) {
      b.fetch(Array::k, l, i, kStages[0].k);
      b.fetch(Array::v, l, i, kStages[0].v);
      b.fetch(Array::q, l, i, kStages[0].q);
      b.fetch(Array::d_o, l, i, kStages[0].d_o);
      b.fetch(Array::lse, l, i, kStages[0].lse);
      b.fetch(Array::delta, l, i, kStages[0].delta);
    } else {
      b.fetch(Array::d_q, l, i, Buf::dq_first);
    }
  };
  fetch_first(0, false);
  fetch_first(0, true);
  for (int i = 0; i < u; ++i) {
    std::vector<int> qs;
    for (int j = i; j < u; ++j)
      if (mask.live(j, i)) qs.push_back(j);
    FPDT_ASSERT(!qs.empty() && qs[0] == i);
    auto fetch_q_set = [&](size_t n) {
      const Stage& stage = stage_of(n);
      b.fetch(Array::q, l, qs[n], stage.q);
      b.fetch(Array::d_o, l, qs[n], stage.d_o);
      b.fetch(Array::lse, l, qs[n], stage.lse);
      b.fetch(Array::delta, l, qs[n], stage.delta);
      b.fetch(Array::d_q, l, qs[n], stage.d_q);
    };
    b.compute<Op::zero>(i, {{buffer, Buf::d_k}});
    b.compute<Op::zero>(i, {{buffer, Buf::d_v}});
    if (mask.documents()) b.compute<Op::docs>(i, {{buffer, Buf::kv_docs}});
    for (size_t n = 0; n < qs.size(); ++n) {
      const Stage& stage = stage_of(n);
      const Buf d_q = n == 0 ? Buf::dq_first : stage.d_q;
      if (n + 1 < qs.size()) fetch_q_set(n + 1);
      if (n == 0) {  // chunk i's input and gradient, for its QKV backward after the loop (behind the next q set)
        b.fetch(Array::x, l, i, Buf::x);
        b.fetch(Array::d_res, l, i, Buf::d_res);
      }
      if (mask.documents()) b.compute<Op::docs>(qs[n], {{buffer, Buf::q_docs}});
      b.compute<Op::attention_block_backward>(qs[n],
                                              {{q, stage.q}, {k, kStages[0].k}, {v, kStages[0].v}, {d_o, stage.d_o},
                                               {lse, stage.lse}, {delta, stage.delta}, {dq, d_q}, {dk, Buf::d_k},
                                               {dv, Buf::d_v}},
                                              Variant::plain, i);
      if (n > 0) b.write(d_q, Array::d_q, l, qs[n]);
    }
    const bool next = i + 1 < u;
    if (next) fetch_first(i + 1, false);
    // dq_i, dk_i, dv_i are final: back to sequence-sharded, then chunk i's QKV projection backward.
    b.compute<Op::q_to_sequence>(i, {{from, Buf::dq_first}, {to, Buf::dq_local}});
    if (next) fetch_first(i + 1, true);
    b.compute<Op::kv_grad_to_sequence>(i, {{from, Buf::d_k}, {to, Buf::dk_local}});
    b.compute<Op::kv_grad_to_sequence>(i, {{from, Buf::d_v}, {to, Buf::dv_local}});
    b.compute<Op::inputs>(i, {});
    b.compute<Op::attention_norm>(i, {{x, Buf::x}});
    b.compute<Op::attention_input_backward>(
        i, {{x, Buf::x}, {dq, Buf::dq_local}, {dk, Buf::dk_local}, {dv, Buf::dv_local}, {d_res, Buf::d_res}});
    b.write(Buf::d_res, Array::d_res, l, i);
  }
}

}  // namespace

Schedule make_schedule(const ChunkPlan& plan, Pass pass, Recompute recompute,
                       const std::vector<BlockMask>& layer_masks, bool mlp_kept, bool bf16_store, bool kv_cache) {
  FPDT_ASSERT(!layer_masks.empty());
  FPDT_ASSERT(!(mlp_kept && recompute == Recompute::layer));
  Schedule schedule;
  schedule.plan = plan;
  schedule.layers = static_cast<int>(layer_masks.size());
  schedule.pass = pass;
  schedule.recompute = recompute;
  const bool backward = pass == Pass::forward_backward;
  schedule.mlp_kept = mlp_kept && backward;
  schedule.bf16_store = bf16_store;
  schedule.kv_cache = kv_cache;
  const int u = plan.chunks;
  const LayerRef l = LayerRef::this_layer;
  using enum Operand;
  auto add = [&](const std::string& name, int mask, auto&& build) {
    Program program;
    program.name = name;
    program.mask = mask;
    Builder builder(program, bf16_store);
    build(builder);
    schedule.programs.push_back(std::move(program));
    return static_cast<int>(schedule.programs.size()) - 1;
  };

  // Layers with equal masks share their programs.
  std::vector<int> mask_of_layer;
  for (const BlockMask& mask : layer_masks) {
    FPDT_ASSERT(mask.chunks() == u);
    const auto found = std::find(schedule.masks.begin(), schedule.masks.end(), mask);
    mask_of_layer.push_back(static_cast<int>(found - schedule.masks.begin()));
    if (found == schedule.masks.end()) schedule.masks.push_back(mask);
  }
  const int masks = static_cast<int>(schedule.masks.size());
  auto suffix = [&](int mask) { return masks > 1 ? " (mask " + std::to_string(mask) + ")" : std::string(); };

  const int embed = add("embed", -1, [&](Builder& b) {
    for (int i = 0; i < u; ++i) {
      b.compute<Op::inputs>(i, {});
      b.compute<Op::embed>(i, {{x, Buf::x_out}});
      b.write(Buf::x_out, Array::x, l, i);
    }
  });
  // Under recompute = layer the forward keeps layer inputs (and k, v while its own chunks need them);
  // the backward re-runs the layer and keeps the rest.
  std::vector<int> forward;
  for (int m = 0; m < masks; ++m)
    forward.push_back(add("layer forward" + suffix(m), m, [&](Builder& b) {
      layer_forward(b, schedule.masks[m], layer_forward_writes(backward, recompute, schedule.mlp_kept, kv_cache));
    }));
  // A KV cache's forward (generation's prefill) runs no LM head over its chunks: the logits wanted are the
  // last position's alone, which generation.cpp computes from its final hidden state.
  const int head = add("head", -1, [&](Builder& b) {
    for (int i = 0; i < u && !kv_cache; ++i) {
      b.compute<Op::inputs>(i, {}, Variant::with_targets);
      b.fetch(Array::x, l, i, Buf::x);
      if (backward) b.compute<Op::zero>(i, {{buffer, Buf::d_res}});
      b.compute<Op::head>(i, {{x, Buf::x}, {d_res, backward ? Buf::d_res : Buf::none}},
                          backward ? Variant::with_backward : Variant::plain);
      if (backward) b.write(Buf::d_res, Array::d_res, l, i);
    }
  });
  std::vector<int> backward_layer;
  int embed_backward = -1;
  if (backward) {
    for (int m = 0; m < masks; ++m)
      backward_layer.push_back(add("layer backward" + suffix(m), m, [&](Builder& b) {
        if (recompute == Recompute::layer) layer_forward(b, schedule.masks[m], kRecomputedForwardWrites);
        layer_backward(b, schedule.masks[m], schedule.mlp_kept);
      }));
    embed_backward = add("embed backward", -1, [&](Builder& b) {
      for (int i = 0; i < u; ++i) {
        b.compute<Op::inputs>(i, {});
        b.fetch(Array::d_res, l, i, Buf::d_res);
        b.compute<Op::embed_backward>(i, {{d_res, Buf::d_res}});
      }
    });
  }
  for (const CallRef& call : call_order(schedule.layers, backward)) {
    const size_t mask = call.kind == CallKind::layer_forward || call.kind == CallKind::layer_backward
                            ? static_cast<size_t>(mask_of_layer[static_cast<size_t>(call.layer)])
                            : 0;
    int program = 0;
    switch (call.kind) {
      case CallKind::embed: program = embed; break;
      case CallKind::layer_forward: program = forward[mask]; break;
      case CallKind::head: program = head; break;
      case CallKind::layer_backward: program = backward_layer[mask]; break;
      case CallKind::embed_backward: program = embed_backward; break;
    }
    schedule.calls.push_back({program, call.layer, call.kind});
  }
  return schedule;
}

ScheduleCopies count_copies(const Schedule& schedule) {
  ScheduleCopies counts;
  for (const Schedule::Call& call : schedule.calls)
    for (const Step& step : schedule.programs[static_cast<size_t>(call.program)].steps) {
      if (step.op == Op::fetch) ++counts.fetches[static_cast<size_t>(step.array)];
      if (step.op == Op::write) ++counts.writes[static_cast<size_t>(step.array)];
    }
  return counts;
}

namespace {

// The blocks of a causal mask (make_block_mask without documents) that decide a layer's copies.
struct LiveBlocks {
  int64_t off_diagonal = 0;  // live blocks (i, j), j < i: each a kv fetch forward, a q set fetch backward
  int64_t seen_later = 0;    // kv chunks j that a later q chunk sees: written out by a forward that keeps none
};

// For q chunk i with real tokens, the live kv chunks j < i are a run ending at i − 1 (every chunk before
// it is whole, and a key further back is further from every query); for kv chunk j, a later q chunk
// sees it iff chunk j + 1 does. So a binary search per q chunk counts them.
LiveBlocks live_blocks(const ChunkPlan& plan, int64_t window_tokens) {
  LiveBlocks live;
  for (int i = 1; i < plan.chunks; ++i) {
    if (!causal_block_live(plan, window_tokens, i, i - 1)) continue;
    live.seen_later += 1;
    int first = 0, last = i - 1;  // the first live j is in [first, last]
    while (first < last) {
      const int middle = first + (last - first) / 2;
      if (causal_block_live(plan, window_tokens, i, middle))
        last = middle;
      else
        first = middle + 1;
    }
    live.off_diagonal += i - first;
  }
  return live;
}

}  // namespace

ScheduleCopies count_copies(const ChunkPlan& plan, Pass pass, Recompute recompute,
                            const std::vector<int64_t>& layer_windows, bool mlp_kept, bool kv_cache) {
  const bool backward = pass == Pass::forward_backward;
  const bool kept = mlp_kept && backward;
  const int64_t u = plan.chunks;
  ScheduleCopies counts;
  auto fetch = [&](std::initializer_list<Array> arrays, int64_t n) {
    for (Array array : arrays) counts.fetches[static_cast<size_t>(array)] += n;
  };
  auto write = [&](std::initializer_list<Array> arrays, int64_t n) {
    for (Array array : arrays) counts.writes[static_cast<size_t>(array)] += n;
  };
  using enum Array;
  auto layer_forward_copies = [&](const LiveBlocks& live, const ForwardWrites& writes) {
    fetch({x}, u);
    write({k, v}, writes.kv_kept ? u : live.seen_later);
    fetch({k, v}, live.off_diagonal);
    if (writes.activations) write({q, o, lse, o_local, x_mid}, u);
    if (!writes.output) return;
    if (writes.mlp) write({gate, up, act}, u);
    write({x}, u);  // the next layer's input
  };
  auto layer_backward_copies = [&](const LiveBlocks& live) {
    if (recompute == Recompute::layer) layer_forward_copies(live, kRecomputedForwardWrites);
    fetch({d_res, x_mid, o_local, o}, u);  // phase A
    if (kept) fetch({gate, up, act}, u);
    write({d_res, d_o, delta, d_q}, u);
    fetch({k, v, q, d_o, lse, delta, d_q}, u);  // phase B: per kv chunk, its first q set (the diagonal)
    fetch({q, d_o, lse, delta, d_q}, live.off_diagonal);  // the other q sets
    write({d_q}, live.off_diagonal);
    fetch({x, d_res}, u);  // the QKV projection's backward
    write({d_res}, u);
  };
  std::map<int64_t, LiveBlocks> by_window;  // layers with equal windows have equal masks
  auto live_of = [&](int layer) -> const LiveBlocks& {
    const int64_t window = layer_windows[static_cast<size_t>(layer)];
    auto found = by_window.find(window);
    if (found == by_window.end()) found = by_window.emplace(window, live_blocks(plan, window)).first;
    return found->second;
  };
  for (const CallRef& call : call_order(static_cast<int>(layer_windows.size()), backward)) {
    switch (call.kind) {
      case CallKind::embed: write({x}, u); break;
      case CallKind::layer_forward:
        layer_forward_copies(live_of(call.layer), layer_forward_writes(backward, recompute, kept, kv_cache));
        break;
      case CallKind::head:
        if (!kv_cache) fetch({x}, u);
        if (backward) write({d_res}, u);
        break;
      case CallKind::layer_backward: layer_backward_copies(live_of(call.layer)); break;
      case CallKind::embed_backward: fetch({d_res}, u); break;
    }
  }
  return counts;
}

std::string Schedule::describe() const {
  std::string text = "FPDT schedule: S " + std::to_string(plan.seq_tokens) + " tokens (padded to " +
                     std::to_string(plan.padded_tokens) + "), " + std::to_string(plan.chunks) + " chunks of C " +
                     std::to_string(plan.chunk_tokens) + " = " + std::to_string(plan.ranks) + " ranks x c " +
                     std::to_string(plan.local_chunk_tokens) + "; " + std::to_string(layers) + " layers; " +
                     (pass == Pass::forward ? "forward" : "forward + backward") + "; recompute " +
                     spelling(recompute) + (mlp_kept ? "; MLP activations kept" : "") +
                     (bf16_store ? "; bf16 store" : "") + (kv_cache ? "; KV cache" : "") + "\n";
  for (size_t m = 0; m < masks.size(); ++m)
    text += (masks.size() > 1 ? "blocks (mask " + std::to_string(m) + "): " : "blocks: ") + masks[m].describe() +
            "\n" + masks[m].describe_blocks();
  text += "calls:";
  for (size_t n = 0; n < calls.size(); ++n)
    text += (n == 0 ? " " : "; ") + programs[calls[n].program].name + " l=" + std::to_string(calls[n].layer);
  text += "\n";
  for (const Program& program : programs) {
    text += "program " + program.name + " (" + std::to_string(program.steps.size()) + " steps, " +
            std::to_string(program.copies) + " copies):\n";
    for (size_t n = 0; n < program.steps.size(); ++n)
      text += "  " + std::to_string(n) + " " + describe_step(program.steps[n]) + "\n";
  }
  return text;
}

}  // namespace fpdt::pipeline

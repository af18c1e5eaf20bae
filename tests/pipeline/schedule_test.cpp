// The FPDT schedule as data: golden text for small plans (u ∈ {1, 2, 3}, P ∈ {1, 2}, recompute none
// and layer, a sliding window), the block mask against a brute-force search over (query, key) pairs,
// and a simulator that runs every program with a FIFO copy queue and checks what each step finds in
// its buffers: the right chunk's q, k, v (and kept MLP activations), every live block merged exactly
// once and no dead one, every read after its fetch completed and no buffer overwritten while a write
// still reads it; and the copies counted in closed form (a dry run's) equal to those of the schedule.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <set>

#include "fpdt/pipeline/schedule.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

// ---- golden text ---------------------------------------------------------------------------------------

// Compares with tests/pipeline/golden/NAME.txt (FPDT_UPDATE_GOLDEN=1 rewrites it).
void expect_golden(const std::string& name, const std::string& text) {
  testing::expect_golden(std::string(FPDT_SOURCE_DIR) + "/tests/pipeline/golden/" + name + ".txt", text);
}

TEST(Schedule, GoldenSmallPlans) {
  // S = 12 tokens cut into u chunks on P ranks, 2 layers (the programs are per layer).
  for (const int u : {1, 2, 3})
    for (const int P : {1, 2})
      for (const Recompute recompute : {Recompute::none, Recompute::layer}) {
        const ChunkPlan plan = make_chunk_plan(12, P, 0, 0, u);
        const Schedule schedule = make_schedule(plan, Pass::forward_backward, recompute, {BlockMask(u), BlockMask(u)});
        expect_golden("schedule_u" + std::to_string(u) + "_p" + std::to_string(P) + "_" + spelling(recompute),
                      schedule.describe());
      }
}

TEST(Schedule, GoldenWindowMask) {
  // S = 32, P = 2, u = 4: C = 8. A window of 9 tokens reaches one chunk back: block (i, j) is live
  // iff i − j ≤ 1 (the first query of chunk i, 8i, and the last key of chunk i − 2, 8i − 9, are 9 apart).
  const ChunkPlan plan = make_chunk_plan(32, 2, 0, 0, 4);
  const BlockMask mask = make_block_mask(plan, 9, nullptr, 1);
  EXPECT_EQ(mask.describe_blocks(), "q 0: kv 0\nq 1: kv 0 1\nq 2: kv 1 2\nq 3: kv 2 3\n");
  const Schedule schedule = make_schedule(plan, Pass::forward_backward, Recompute::none, {mask, mask});
  expect_golden("schedule_u4_p2_none_window9", schedule.describe());
  // Absent blocks are not fetched: the forward fetches k, v of the 3 live blocks below the diagonal;
  // the backward fetches one q set per live block (7) and each kv chunk once (4).
  auto fetches = [&](const char* program, Array array) {
    int count = 0;
    for (const Program& p : schedule.programs)
      if (p.name == program)
        for (const Step& step : p.steps) count += step.op == Op::fetch && step.array == array;
    return count;
  };
  EXPECT_EQ(fetches("layer forward", Array::k), 3);
  EXPECT_EQ(fetches("layer backward", Array::q), 7);
  EXPECT_EQ(fetches("layer backward", Array::k), 4);

  // A model mixing sliding-window and full layers: layers with equal masks share their programs.
  const Schedule mixed =
      make_schedule(plan, Pass::forward_backward, Recompute::none, {BlockMask(4), mask, BlockMask(4)});
  ASSERT_EQ(mixed.masks.size(), 2u);
  std::vector<std::string> called;
  for (const Schedule::Call& call : mixed.calls)
    called.push_back(mixed.programs[call.program].name + " l=" + std::to_string(call.layer));
  EXPECT_EQ(called, (std::vector<std::string>{"embed l=0", "layer forward (mask 0) l=0", "layer forward (mask 1) l=1",
                                              "layer forward (mask 0) l=2", "head l=3", "layer backward (mask 0) l=2",
                                              "layer backward (mask 1) l=1", "layer backward (mask 0) l=0",
                                              "embed backward l=0"}));
}

// ---- steps name their buffers by role ----------------------------------------------------------------

TEST(Schedule, StepsHoldTheirBuffersInTheirSignaturesRoles) {
  // Every buffer a step holds plays one of its op's roles; a role the op lacks is refused at run time as
  // at compile time (tests/pipeline/operand_names_compile.cpp).
  const ChunkPlan plan = make_chunk_plan(12, 2, 0, 0, 3);
  for (const bool mlp_kept : {false, true}) {
    const Schedule schedule =
        make_schedule(plan, Pass::forward_backward, Recompute::none, {BlockMask(3), BlockMask(3)}, mlp_kept);
    int named = 0;
    for (const Program& program : schedule.programs)
      for (const Step& step : program.steps) {
        const Signature operands = signature(step.op);
        for (int k = 0; k < kMaxOperands; ++k) {
          if (step.buffers[k] == Buf::none) continue;
          ASSERT_LT(k, operands.size) << describe_step(step);
          EXPECT_NE(operand_role(step, k), Role::none) << describe_step(step);
          EXPECT_EQ(step.buffer(operands.operands[static_cast<size_t>(k)].name), step.buffers[k]);
          ++named;
        }
      }
    EXPECT_GT(named, 0);
  }
  Step mlp{Op::mlp};
  mlp.buffers[signature(Op::mlp).position(Operand::x_mid)] = Buf::x_mid;
  EXPECT_EQ(mlp.buffer(Operand::x_mid), Buf::x_mid);
  EXPECT_EQ(mlp.buffer(Operand::gate), Buf::none);  // a role it has, not given
  testing::expect_contains(testing::error_message([&] { mlp.buffer(Operand::dq); }), {"[internal]", "position >= 0"});
}

// ---- the block mask ----------------------------------------------------------------------------------

// Block (i, j) is live iff some query q of chunk i and key k of chunk j (both real tokens) have k ≤ q,
// q − k < W (W > 0) and the same document in some sequence.
bool brute_force_live(const ChunkPlan& plan, int i, int j, int64_t window, const std::vector<int32_t>& docs, int B) {
  const int64_t C = plan.chunk_tokens, S = plan.seq_tokens;
  for (int b = 0; b < B; ++b)
    for (int64_t q = i * C; q < std::min((i + 1) * C, S); ++q)
      for (int64_t k = j * C; k < std::min((j + 1) * C, S); ++k) {
        const bool same_document = docs.empty() || docs[b * S + q] == docs[b * S + k];
        if (k <= q && (window == 0 || q - k < window) && same_document) return true;
      }
  return false;
}

TEST(BlockMask, EqualsBruteForce) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int P = 1 + static_cast<int>(rng.below(3)), u = 1 + static_cast<int>(rng.below(6));
    const int64_t S = 1 + static_cast<int64_t>(rng.below(60));
    const ChunkPlan plan = make_chunk_plan(S, P, 0, 0, u);
    const int64_t window = rng.below(3) == 0 ? 0 : 1 + static_cast<int64_t>(rng.below(2 * plan.chunk_tokens + 2));
    const int B = 1 + static_cast<int>(rng.below(3));
    std::vector<int32_t> docs;
    if (rng.below(2) == 0) {  // packed documents: ids non-decreasing along each sequence, random lengths
      for (int b = 0; b < B; ++b) {
        int32_t id = 0;
        for (int64_t t = 0; t < S; ++t) {
          if (t > 0 && rng.uniform() < 0.15) ++id;
          docs.push_back(id);
        }
      }
    }
    const BlockMask mask = make_block_mask(plan, window, docs.empty() ? nullptr : docs.data(), B);
    SCOPED_TRACE("S " + std::to_string(S) + " P " + std::to_string(P) + " u " + std::to_string(u) + " window " +
                 std::to_string(window) + (docs.empty() ? "" : " documents"));
    for (int i = 0; i < plan.chunks; ++i) {
      for (int j = 0; j < plan.chunks; ++j) {
        // The diagonal stays live even when padding is all it holds: its queries see themselves.
        const bool want = i == j || (j < i && brute_force_live(plan, i, j, window, docs, B));
        EXPECT_EQ(mask.live(i, j), want) << "block " << i << "," << j;
      }
    }
  }
}

TEST(BlockMask, DocumentsOfABatchAreUnited) {
  // S = 8, u = 4 (C = 2): sequence 0 is one document, sequence 1 is four of two tokens each. Alone,
  // sequence 1 would make every block below the diagonal empty; with sequence 0 all are live.
  const ChunkPlan plan = make_chunk_plan(8, 1, 0, 0, 4);
  const std::vector<int32_t> docs = {0, 0, 0, 0, 0, 0, 0, 0, /**/ 0, 0, 1, 1, 2, 2, 3, 3};
  EXPECT_EQ(make_block_mask(plan, 0, docs.data() + 8, 1).live_count(), 4);
  EXPECT_EQ(make_block_mask(plan, 0, docs.data(), 2).live_count(), 10);
  EXPECT_EQ(make_block_mask(plan, 0, docs.data(), 2).describe(), "causal, documents (10 of 10 causal blocks live)");
  testing::expect_contains(testing::error_message([&] { make_block_mask(plan, -1, nullptr, 1); }),
                           {"window must be positive"});
}

// ---- the simulator ------------------------------------------------------------------------------------

// What a buffer or store slot holds: a value of one kind, layer and chunk; partial sums also carry the
// blocks merged into them so far.
struct Value {
  std::string kind;  // "x" (a layer input), "q", "k", "v", "o", "lse", "o_tokens", "x_mid", "norm", "g_mid"
                     // (dL/dx_mid), "g" (dL/dx), "d_attn", "delta", "dq", "dk", "dv", "dq_tokens",
                     // "dk_tokens", "dv_tokens", "zero", "docs", "scratch"; "" = nothing
  int layer = -1;
  int chunk = -1;
  std::set<int> blocks;  // o, lse: kv chunks merged; dq: kv chunks; dk, dv: q chunks
  bool operator==(const Value& other) const = default;
};

Value zero_value() { return Value{"zero", -1, -1, {}}; }

std::string show(const Value& v) {
  std::string text = v.kind + "(" + std::to_string(v.layer) + "," + std::to_string(v.chunk) + ")";
  if (!v.blocks.empty()) {
    text += "{";
    for (int block : v.blocks) text += std::to_string(block) + " ";
    text += "}";
  }
  return text;
}

class Simulator {
 public:
  Simulator(const Schedule& schedule) : s_(schedule), u_(schedule.plan.chunks), L_(schedule.layers) {}

  void run() {
    for (const Schedule::Call& call : s_.calls) {
      const Program& program = s_.programs[call.program];
      layer_ = call.layer;
      mask_ = program.mask >= 0 ? &s_.masks[static_cast<size_t>(program.mask)] : nullptr;
      program_start_ = next_copy_;
      for (const Step& step : program.steps) {
        SCOPED_TRACE(program.name + " l=" + std::to_string(layer_) + ": " + describe_step(step));
        this->step(step);
        if (::testing::Test::HasFailure()) return;
      }
    }
    complete_until(next_copy_);  // wait_all at the end of the step
    // Every parameter's gradient was reached: dL/dx of every chunk of layer 0 went to the embedding.
    if (s_.pass == Pass::forward_backward) {
      EXPECT_EQ(embedded_, u_);
    }
  }

 private:
  struct Copy {
    int64_t number;
    bool fetch;
    int buffer;
    std::vector<std::tuple<int, int, int>> slots;  // slots(step)
    Value value;  // a write's data, taken when queued (a change before it completes is a failure)
  };

  // The store slots a fetch reads (the first) and a write fills (all): dQ's are its layer's o and o_local
  // (ArraySpec::in_slots_of), so a write of dQ overwrites them, and a later fetch of either finds dQ.
  std::vector<std::tuple<int, int, int>> slots(const Step& step) const {
    const int layer = step.layer == LayerRef::next_layer ? layer_ + 1 : layer_;
    const ArraySpec spec = store_arrays(LayoutShape{}).at(static_cast<size_t>(step.array));
    std::vector<Array> arrays = {step.array};
    if (spec.in_slots_of != Array::count)
      arrays = {spec.in_slots_of, static_cast<Array>(static_cast<int>(spec.in_slots_of) + 1)};
    std::vector<std::tuple<int, int, int>> keys;
    for (const Array array : arrays) {
      const bool one_layer = (array >= Array::d_res && array != Array::d_q) ||
                             (array != Array::x && s_.recompute == Recompute::layer);
      keys.emplace_back(static_cast<int>(array), one_layer ? 0 : layer, step.chunk);
    }
    return keys;
  }

  // Completes the copies numbered below `end` (global numbers), in order.
  void complete_until(int64_t end) {
    while (!queue_.empty() && queue_.front().number < end) {
      Copy copy = std::move(queue_.front());
      queue_.pop_front();
      if (copy.fetch) {
        const auto found = store_.find(copy.slots[0]);
        ASSERT_TRUE(found != store_.end()) << "fetch of a slot never written";
        buffers_[copy.buffer] = found->second;
        fetching_.erase(copy.buffer);
      } else {
        for (const auto& slot : copy.slots) store_[slot] = copy.value;
        writing_.erase(writing_.find(copy.buffer));
      }
    }
  }

  Value& read(Buf buffer) {
    const int b = static_cast<int>(buffer);
    EXPECT_FALSE(fetching_.count(b)) << buffer_name(buffer) << " read before its fetch completed";
    return buffers_[b];
  }
  Value& overwrite(Buf buffer) {
    const int b = static_cast<int>(buffer);
    EXPECT_FALSE(fetching_.count(b)) << buffer_name(buffer) << " overwritten while a fetch fills it";
    EXPECT_FALSE(writing_.count(b)) << buffer_name(buffer) << " overwritten while a write still reads it";
    return buffers_[b];
  }
  void expect(Buf buffer, const std::string& kind, int chunk) {
    const Value& v = read(buffer);
    EXPECT_EQ(v.kind, kind) << buffer_name(buffer) << " holds " << show(v);
    EXPECT_EQ(v.chunk, chunk) << buffer_name(buffer) << " holds " << show(v);
    EXPECT_EQ(v.layer, kind == "docs" ? -1 : layer_) << buffer_name(buffer) << " holds " << show(v);
  }
  std::set<int> live_kv(int q) const {
    std::set<int> kv;
    for (int j = 0; j <= q; ++j)
      if (mask_->live(q, j)) kv.insert(j);
    return kv;
  }
  std::set<int> live_q(int kv) const {
    std::set<int> q;
    for (int i = kv; i < u_; ++i)
      if (mask_->live(i, kv)) q.insert(i);
    return q;
  }
  void expect_inputs(int chunk, bool targets = false) {
    EXPECT_EQ(inputs_chunk_, chunk) << "token ids of another chunk";
    if (targets) {
      EXPECT_TRUE(inputs_targets_) << "no targets uploaded";
    }
  }
  Value make(const std::string& kind, int chunk, std::set<int> blocks = {}) const {
    return Value{kind, layer_, chunk, std::move(blocks)};
  }
  // A partial sum of `kind` for `chunk` (or zeros) gains `block`, which it must not hold yet.
  void accumulate(Buf buffer, const std::string& kind, int chunk, int block, const std::set<int>& allowed) {
    Value& v = overwrite(buffer);
    if (v.kind == "zero") v = make(kind, chunk);
    EXPECT_EQ(v.kind, kind) << buffer_name(buffer) << " holds " << show(v);
    EXPECT_EQ(v.chunk, chunk) << buffer_name(buffer) << " holds " << show(v);
    EXPECT_TRUE(allowed.count(block)) << "block " << block << " is not live";
    EXPECT_TRUE(v.blocks.insert(block).second) << "block " << block << " merged twice into " << show(v);
  }

  // With a bf16 store an activation array goes out of and comes into a bf16 twin, and only those arrays.
  void expect_through_twin(const Step& step) const {
    const Buf buffer = step.buffer(Operand::buffer);
    bool twin = false;
    for (int k = 0; k < kBufCount; ++k) twin = twin || packed_twin(static_cast<Buf>(k)) == buffer;
    EXPECT_EQ(twin, s_.bf16_store && stored_as_activation(step.array))
        << buffer_name(buffer) << " for array " << array_name(step.array);
  }

  void step(const Step& step) {
    using enum Operand;
    auto at = [&](Operand name) { return step.buffer(name); };  // the buffer playing `name`
    const int i = step.chunk, j = step.kv_chunk;
    switch (step.op) {
      case Op::fetch: {
        expect_through_twin(step);
        // After a write out of the buffer is fine: the queue is FIFO.
        EXPECT_FALSE(fetching_.count(static_cast<int>(at(buffer)))) << "a second fetch into "
                                                                   << buffer_name(at(buffer));
        fetching_.insert(static_cast<int>(at(buffer)));
        queue_.push_back({next_copy_++, true, static_cast<int>(at(buffer)), slots(step), {}});
        return;
      }
      case Op::write:
        expect_through_twin(step);
        queue_.push_back({next_copy_++, false, static_cast<int>(at(buffer)), slots(step), read(at(buffer))});
        writing_.insert(static_cast<int>(at(buffer)));
        return;
      case Op::wait: complete_until(step.copy < 0 ? program_start_ : program_start_ + step.copy + 1); return;
      case Op::zero: overwrite(at(buffer)) = zero_value(); return;
      case Op::segment: return;  // the model states' steps: no chunk data
      case Op::pack:
      case Op::unpack: {  // the same data, in bf16 or back in fp32 lanes: from a buffer to its twin or back
        EXPECT_TRUE(s_.bf16_store) << "pack or unpack in a schedule of an fp32 store";
        const Buf data = step.op == Op::pack ? at(from) : at(to), twin = step.op == Op::pack ? at(to) : at(from);
        EXPECT_EQ(packed_twin(data), twin) << buffer_name(twin) << " is not the twin of " << buffer_name(data);
        const Value v = read(at(from));
        EXPECT_EQ(v.chunk, i) << show(v);
        overwrite(at(to)) = v;
        return;
      }
      case Op::inputs:
        inputs_chunk_ = i;
        inputs_targets_ = step.variant == Variant::with_targets;
        return;
      case Op::docs: overwrite(at(buffer)) = Value{"docs", -1, i, {}}; return;
      case Op::q_to_heads:
      case Op::kv_to_heads:
      case Op::q_to_sequence:
      case Op::kv_grad_to_sequence: {
        Value v = read(at(from));
        EXPECT_EQ(v.chunk, i) << show(v);
        EXPECT_EQ(v.layer, layer_) << show(v);
        if (v.kind == "o") {
          EXPECT_EQ(v.blocks, live_kv(i)) << "attention output used before every live block";
        }
        if (v.kind == "dq") {
          EXPECT_EQ(v.blocks, live_kv(i)) << "dq used before every live kv block";
        }
        if (v.kind == "dk" || v.kind == "dv") {
          EXPECT_EQ(v.blocks, live_q(i)) << "dk/dv used before every live q block";
        }
        if (step.op == Op::q_to_sequence || step.op == Op::kv_grad_to_sequence) v = make(v.kind + "_tokens", i);
        overwrite(at(to)) = v;
        return;
      }
      case Op::embed:
        expect_inputs(i);
        overwrite(at(x)) = make("x", i);
        return;
      case Op::attention_input:
        expect_inputs(i);
        expect(at(x), "x", i);
        norm_ = make("norm", i);
        overwrite(at(q)) = make("q", i);
        overwrite(at(k)) = make("k", i);
        overwrite(at(v)) = make("v", i);
        return;
      case Op::attention_block: {
        expect(at(q), "q", i);
        expect(at(k), "k", j);
        expect(at(v), "v", j);
        if (mask_->documents()) {
          expect(Buf::q_docs, "docs", i);
          expect(Buf::kv_docs, "docs", j);
        }
        for (const Buf out : {at(o), at(lse)}) {
          if (step.variant != Variant::merge) overwrite(out) = zero_value();
          accumulate(out, out == Buf::lse ? "lse" : "o", i, j, live_kv(i));
        }
        return;
      }
      case Op::attention_output:
        expect(at(o), "o_tokens", i);
        expect(at(x), "x", i);
        overwrite(at(x_mid)) = make("x_mid", i);
        return;
      case Op::mlp: {
        expect(at(x_mid), "x_mid", i);
        Value next = make("x", i);
        next.layer = layer_ + 1;
        overwrite(at(x_out)) = next;
        for (const Operand kept : {gate, up, act}) {  // when kept for the backward
          EXPECT_EQ(at(kept) != Buf::none, s_.mlp_kept);
          if (at(kept) != Buf::none) overwrite(at(kept)) = make(std::string("mlp ") + buffer_name(at(kept)), i);
        }
        return;
      }
      case Op::head:
        expect_inputs(i, true);
        expect(at(x), "x", i);
        if (step.variant != Variant::with_backward) return;
        EXPECT_EQ(read(at(d_res)).kind, "zero");
        overwrite(at(d_res)) = Value{"g", L_, i, {}};
        return;
      case Op::mlp_backward: {
        expect(at(x_mid), "x_mid", i);
        const Value& g = read(at(d_res));
        EXPECT_EQ(g, (Value{"g", layer_ + 1, i, {}})) << "d_res holds " << show(g);
        overwrite(at(d_res)) = make("g_mid", i);
        EXPECT_EQ(step.variant == Variant::from_kept, s_.mlp_kept);
        if (step.variant == Variant::from_kept) {  // gate, up, act of this chunk and layer, as the forward wrote them
          for (const Operand kept : {gate, up, act}) expect(at(kept), std::string("mlp ") + buffer_name(at(kept)), i);
        } else {
          overwrite(at(x_out)) = Value{"scratch", -1, -1, {}};
        }
        return;
      }
      case Op::attention_output_backward:
        expect(at(o), "o_tokens", i);
        expect(at(d_res), "g_mid", i);
        overwrite(at(d_attn)) = make("d_attn", i);
        return;
      case Op::attention_delta:
        expect(at(d_o), "d_attn", i);
        expect(at(o), "o", i);
        EXPECT_EQ(read(at(o)).blocks, live_kv(i));
        overwrite(at(delta)) = make("delta", i);
        return;
      case Op::attention_block_backward: {
        expect(at(q), "q", i);
        expect(at(k), "k", j);
        expect(at(v), "v", j);
        expect(at(d_o), "d_attn", i);
        expect(at(lse), "lse", i);
        EXPECT_EQ(read(at(lse)).blocks, live_kv(i)) << "backward before the final LSE";
        expect(at(delta), "delta", i);
        if (mask_->documents()) {
          expect(Buf::q_docs, "docs", i);
          expect(Buf::kv_docs, "docs", j);
        }
        accumulate(at(dq), "dq", i, j, live_kv(i));
        accumulate(at(dk), "dk", j, i, live_q(j));
        accumulate(at(dv), "dv", j, i, live_q(j));
        return;
      }
      case Op::attention_norm:
        expect(at(x), "x", i);
        norm_ = make("norm", i);
        return;
      case Op::attention_input_backward:
        expect_inputs(i);
        expect(at(x), "x", i);
        EXPECT_EQ(norm_, make("norm", i)) << "the norm of another chunk";
        expect(at(dq), "dq_tokens", i);
        expect(at(dk), "dk_tokens", i);
        expect(at(dv), "dv_tokens", i);
        expect(at(d_res), "g_mid", i);
        overwrite(at(d_res)) = make("g", i);
        return;
      case Op::embed_backward:
        expect_inputs(i);
        EXPECT_EQ(read(at(d_res)), (Value{"g", 0, i, {}})) << "d_res holds " << show(read(at(d_res)));
        ++embedded_;
        return;
      case Op::count: ADD_FAILURE() << "a step of op count, which is no op"; return;
    }
  }

  const Schedule& s_;
  const BlockMask* mask_ = nullptr;  // of the layer program being run
  int u_, L_;
  int layer_ = 0;
  int64_t next_copy_ = 0, program_start_ = 0;
  std::deque<Copy> queue_;
  std::set<int> fetching_;     // buffers a queued fetch fills
  std::multiset<int> writing_;  // buffers queued writes read
  std::map<int, Value> buffers_;
  std::map<std::tuple<int, int, int>, Value> store_;
  Value norm_;
  int inputs_chunk_ = -1;
  bool inputs_targets_ = false;
  int embedded_ = 0;
};

TEST(Schedule, SimulatedStepsSeeTheRightData) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  int checked = 0;
  for (int u = 1; u <= 6; ++u)
    for (const int P : {1, 2})
      for (const Recompute recompute : {Recompute::none, Recompute::layer})
        for (const bool mlp_kept : {false, true})
          for (const Pass pass : {Pass::forward, Pass::forward_backward})
            for (int masking = 0; masking < 8 && !(mlp_kept && recompute == Recompute::layer); ++masking) {
              const bool bf16_store = masking & 4;  // the activation arrays in bf16, through the twins
              const int64_t S = u * P * 4 - static_cast<int64_t>(rng.below(4));
              const ChunkPlan plan = make_chunk_plan(S, P, 0, 0, u);
              const int64_t window = masking & 1 ? 1 + static_cast<int64_t>(rng.below(3 * plan.chunk_tokens)) : 0;
              std::vector<int32_t> docs;
              for (int64_t t = 0, id = 0; t < 2 * S && (masking & 2); ++t) {
                if (t % S == 0 || rng.uniform() < 0.2) ++id;
                docs.push_back(static_cast<int32_t>(id));
              }
              // The window applies to the middle layer only (as in models that mix sliding and full layers).
              const int32_t* doc_ids = docs.empty() ? nullptr : docs.data();
              const BlockMask full = make_block_mask(plan, 0, doc_ids, 2);
              const BlockMask mask = make_block_mask(plan, window, doc_ids, 2);
              const Schedule schedule =
                  make_schedule(plan, pass, recompute, {full, mask, full}, mlp_kept, bf16_store);
              SCOPED_TRACE("u " + std::to_string(u) + " P " + std::to_string(P) + " recompute " +
                           spelling(recompute) + (mlp_kept ? " MLP kept" : "") + (bf16_store ? " bf16 store" : "") +
                           (pass == Pass::forward ? " forward" : " forward + backward") + " mask " + mask.describe());
              Simulator(schedule).run();
              ++checked;
              if (::testing::Test::HasFailure()) return;
            }
  EXPECT_EQ(checked, 576);
}

// count_copies without a schedule (what a dry run of any number of chunks counts) is what the built
// schedule queues, array by array: every pass, recompute, kept MLP, window and padding, with layers of
// two windows.
TEST(Schedule, CopiesCountedInClosedFormAreTheSchedules) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  int checked = 0;
  for (int u = 1; u <= 9; ++u)
    for (const int P : {1, 2})
      for (const Recompute recompute : {Recompute::none, Recompute::layer})
        for (const bool mlp_kept : {false, true})
          for (const Pass pass : {Pass::forward, Pass::forward_backward})
            for (int trial = 0; trial < 4 && !(mlp_kept && recompute == Recompute::layer); ++trial) {
              // Up to a chunk and a half of padding (chunks of padding only, too).
              const ChunkPlan plan = make_chunk_plan(
                  u * P * 4 - static_cast<int64_t>(rng.below(std::min(6 * P, 4 * u * P))), P, 0, 0, u);
              const int64_t window = trial == 0 ? 0 : 1 + static_cast<int64_t>(rng.below(3 * plan.chunk_tokens));
              const std::vector<int64_t> windows = {0, window, 0};
              std::vector<BlockMask> masks;
              for (const int64_t w : windows) masks.push_back(make_block_mask(plan, w, nullptr, 1));
              SCOPED_TRACE("u " + std::to_string(u) + " P " + std::to_string(P) + " S " +
                           std::to_string(plan.seq_tokens) + " window " + std::to_string(window) + " recompute " +
                           spelling(recompute) + (mlp_kept ? " MLP kept" : "") +
                           (pass == Pass::forward ? " forward" : " forward + backward"));
              for (const bool kv_cache : {false, true}) {  // a generation's forward writes every k and v
                if (kv_cache && pass != Pass::forward) continue;
                SCOPED_TRACE(kv_cache ? "KV cache" : "");
                const ScheduleCopies built =
                    count_copies(make_schedule(plan, pass, recompute, masks, mlp_kept, false, kv_cache));
                const ScheduleCopies counted = count_copies(plan, pass, recompute, windows, mlp_kept, kv_cache);
                for (int a = 0; a < kArrayCount; ++a) {
                  EXPECT_EQ(counted.fetches[a], built.fetches[a]) << "fetches of " << array_name(static_cast<Array>(a));
                  EXPECT_EQ(counted.writes[a], built.writes[a]) << "writes of " << array_name(static_cast<Array>(a));
                }
                ++checked;
                if (::testing::Test::HasFailure()) return;
              }
            }
  EXPECT_EQ(checked, 9 * 2 * 3 * 3 * 4);  // (u, P, recompute and MLP, forward / + KV cache / + backward, trial)
}

}  // namespace
}  // namespace fpdt::pipeline

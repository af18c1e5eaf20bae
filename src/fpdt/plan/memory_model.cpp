// The memory model, one function per component (see memory_model.h and docs/memory.md).
// Bytes are doubles: exact for every size that matters and free of overflow.
#include "fpdt/plan/memory_model.h"

#include <algorithm>
#include <cmath>

#include "fpdt/base/error.h"
#include "fpdt/pipeline/model_states.h"

namespace fpdt::plan {

namespace {

constexpr double kFp32 = 4.0;

double d(int64_t value) { return static_cast<double>(value); }

// The refusal of a layout that cannot be laid out, as `fpdt train --dry-run` words it: more bytes than
// 64-bit sizes count. (Too many chunks for an int the run spec's chunk rule refuses, in derive_shape.)
[[noreturn]] void throw_not_countable(const PlanConfig& config) {
  const std::string too_long = "--seq " + std::to_string(config.run.seq_tokens) + " is too long for '" + config.model.name + "': ";
  throw Error("plan", too_long + "one step's buffers would take more bytes than 64-bit sizes count",
              "lower --seq (fpdt plan --max-seq finds the longest sequence that fits)");
}
}  // namespace

std::string phase_name(Phase phase) {
  switch (phase) {
    case Phase::always: return "always";
    case Phase::forward: return "layer forward";
    case Phase::token_backward: return "MLP backward";
    case Phase::attention_backward: return "attention backward";
    case Phase::loss: return "loss";
  }
  return "?";
}

// ---- model states ----------------------------------------------------------------------------------

double weight_bytes(const PlanConfig& config, const PlanShape& s) {
  return d(s.params) * s.a / (config.run.zero >= 3 ? d(s.W) : 1.0);
}

double gradient_bytes(const PlanConfig& config, const PlanShape& s) {
  return d(s.params) * kFp32 / (config.run.zero >= 2 ? d(s.W) : 1.0);
}

double optimizer_bytes(const PlanConfig& config, const PlanShape& s) {
  const double per_param = 2 * kFp32 + (config.run.precision == Precision::bf16 ? kFp32 : 0.0);
  return d(s.params) * per_param / (config.run.zero >= 1 ? d(s.W) : 1.0);
}

double zero3_gather_bytes(const PlanConfig& config, const PlanShape& s) {
  if (config.run.zero < 3 || s.W == 1) return 0;
  return 2 * s.a * d(s.largest_tensor);
}

// ---- shared -----------------------------------------------------------------------------------------

double checkpoint_bytes(const PlanShape& s) { return d(s.L) * s.a * d(s.h) * d(s.T); }

double rope_table_bytes(const PlanShape& s) { return 2 * d(s.S) * d(s.rotary_dim) * kFp32; }

// ---- ulysses ------------------------------------------------------------------------------------------

double ulysses_attention_saved_bytes(const PlanShape& s) {
  // x, norm1(x), q k v after the all-to-all, flash output, LSE (fp32, Hq per local token), output
  // after the all-to-all back (the out-projection's input).
  const double per_token =
      s.a * d(s.h + s.h + s.q + 2 * s.kv_heads + s.q + s.q) + kFp32 * d(s.Hq);
  return per_token * d(s.T);
}

double ulysses_layer_saved_bytes(const PlanShape& s) {
  // + the residual (norm2's input), norm2's output, the MLP's up projection and activation.
  return ulysses_attention_saved_bytes(s) + s.a * d(s.h + s.h + s.mlp_up + s.f) * d(s.T);
}

double ulysses_mlp_backward_bytes(const PlanShape& s) {
  // grad of the MLP output, of the activation, of the up projection; + the residual-stream gradient.
  return s.a * d(s.h + s.f + s.mlp_up + s.h) * d(s.T);
}

double ulysses_attention_backward_bytes(const PlanShape& s) {
  double per_token = s.a * d(s.q)                          // dO after the all-to-all
                     + s.a * d(s.q + 2 * s.kv_heads)       // dq dk dv, head-sharded
                     + kFp32 * d(s.q)                      // flash attention's fp32 dq accumulator
                     + s.a * d(s.q + 2 * s.kv)             // dq dk dv after the all-to-all back
                     + s.a * d(2 * s.h)                    // grads of the layer output and attention output
                     + 2 * s.a * d(std::max(s.q, s.kv_heads));  // all-to-all staging: input copy + output
  if (s.kv_heads < s.q) per_token += s.a * d(2 * s.q);     // flash expands dk, dv to Hq heads (GQA)
  return per_token * d(s.T);
}

double ulysses_forward_bytes(const PlanShape& s) {
  // no-grad forward of one layer at its widest: x, norm1, qkv, q k v after the all-to-all, the
  // all-to-all staging, output, and the MLP's two intermediates.
  const double per_token = s.a * d(s.h + s.h + (s.q + 2 * s.kv) + (s.q + 2 * s.kv_heads) +
                                   2 * std::max(s.q, s.kv_heads) + s.q + s.mlp_up + s.f);
  return per_token * d(s.T);
}

double ulysses_loss_bytes(const PlanShape& s) {
  const double fp32_copy = s.a < kFp32 ? kFp32 : 0.0;  // output.float() copies only when not fp32
  const double per_token = (s.a + fp32_copy + kFp32 + kFp32) * d(s.V) + 2 * s.a * d(s.h);
  return per_token * d(s.T);
}

// ---- fpdt-reference -------------------------------------------------------------------------------------

double reference_forward_resident_bytes(const PlanShape& s) {
  // x, norm1(x), the list of all-to-all'd output chunks and their torch.cat.
  return s.a * d(2 * s.h + 2 * s.q) * d(s.T);
}

double reference_ffn_resident_bytes(const PlanShape& s) {
  // x, grad of the layer output, attention output (the out-projection's input), residual, norm2(x)
  // (which FPDT_FFN overwrites with its gradient).
  return s.a * d(4 * s.h + s.q) * d(s.T);
}

double reference_attention_resident_bytes(const PlanShape& s) {
  // x, grad of the layer output, grad of the residual, grad of the attention output (input of the
  // attention backward), grad_layernorm_output's u chunks, and their torch.cat at the end.
  return s.a * d(5 * s.h + s.q) * d(s.T);
}

double reference_loss_resident_bytes(const PlanShape& s) {
  // final hidden (the final norm's input), grad_lm_output's chunks and their torch.cat.
  return 3 * s.a * d(s.h) * d(s.T);
}

double reference_forward_chunk_bytes(const PlanShape& s) {
  const double per_token =
      s.a * d(s.q + 2 * s.kv) * 2                 // qkv projection of a local chunk + its q/k/v split copies
      + 2 * s.a * d(std::max(s.q, s.kv))          // all-to-all staging of one of them
      + s.a * d(s.q + 2 * 2 * s.kv_heads)         // q of the chunk; k, v current + prefetched
      + kFp32 * d(s.q) + 3 * kFp32 * d(s.Hq)      // fp32 output accumulator; lse, new lse, block lse
      + s.a * d(s.q)                              // block output
      + 2 * kFp32 * d(s.q)                        // the two rescaled terms of the LSE merge
      + 2 * s.a * d(s.q);                         // all-to-all of the output back to tokens
  return per_token * d(s.c);
}

double reference_backward_chunk_bytes(const PlanShape& s) {
  double per_token = 2 * s.a * d(3 * s.q)         // q, o, dO: current + prefetched
                     + 2 * kFp32 * d(s.Hq)        // lse: current + prefetched
                     + 2 * kFp32 * d(s.q)         // dq (fp32): current + prefetched
                     + kFp32 * d(2 * s.kv_heads)  // dk, dv accumulators (fp32)
                     + 2 * s.a * d(2 * s.kv_heads)  // k, v: current + prefetched
                     + s.a * d(s.q + 2 * s.kv_heads)  // dq, dk, dv of one block
                     + kFp32 * d(s.q)             // flash attention's fp32 dq accumulator
                     + s.a * d(s.q + 2 * s.kv_heads) + s.a * d(s.q + 2 * s.kv);  // end of step: bf16
                                                  // dq dk dv and their all-to-all'd token copies
  if (s.kv_heads < s.q) per_token += s.a * d(2 * s.q);  // flash's GQA expansion of dk, dv
  return per_token * d(s.c);
}

double reference_ffn_chunk_bytes(const PlanShape& s) {
  // FPDT_FFN's backward over c/2 tokens: before_act, its square, tanh, the GELU derivative and two
  // temporaries of the weight gradient's operand — three copies of (up + activation) per token —
  // plus fp32 accumulators for both weight gradients.
  const double chunk_tokens = d(s.c) / 2;
  return 3 * s.a * d(s.mlp_up + s.f) * chunk_tokens + kFp32 * d(s.h * s.mlp_up + s.f * s.h);
}

double reference_loss_chunk_bytes(const PlanShape& s) {
  const double fp32_copy = s.a < kFp32 ? kFp32 : 0.0;
  // logits, .float(), softmax, softmax.log() over c tokens; the fp32 gradient of the head weight.
  return (s.a + fp32_copy + 2 * kFp32) * d(s.V) * d(s.c) + kFp32 * d(s.V) * d(s.h);
}

double reference_offload_layer_bytes(const PlanShape& s) {
  const double per_token = s.a * d(2 * s.q + 2 * s.kv_heads)  // q, k, v, o chunks
                           + kFp32 * d(s.Hq)                   // lse
                           + s.a * d(s.h)                      // norm1 output chunks
                           + kFp32 * d(s.q)                    // dq (fp32, pinned)
                           + s.a * d(s.q);                     // dO chunks
  return per_token * d(s.T);
}

double reference_offload_forward_bytes(const PlanShape& s) {
  // the forward offloads q, k, v, o, lse and the norm1 output of the layer it runs
  return (s.a * d(2 * s.q + 2 * s.kv_heads) + kFp32 * d(s.Hq) + s.a * d(s.h)) * d(s.T);
}

// ---- fpdt, ours: the pipeline's memory table ----------------------------------------------------------

namespace {

// Rank 0's layout; the others differ from it in their heads only (pipeline::layout_of_rank).
pipeline::LayoutShape fpdt_rank0_layout(const PlanConfig& config, const PlanShape& s) {
  const int P = static_cast<int>(s.P);
  const pipeline::HeadSharding sharding = pipeline::make_head_sharding(config.model.heads, config.model.kv_heads, P, 0);
  return pipeline::layout_shape(config.model, sharding, s.chunk_plan, s.B,
                                config.run.recompute == Recompute::layer ? 1 : s.L, static_cast<int64_t>(s.a),
                                pipeline::keep_mlp_activations(config.run.offload.kind == OffloadKind::none, config.run.recompute));
}

}  // namespace

int fpdt_largest_rank(const PlanConfig& config, const PlanShape& s) {
  return pipeline::largest_rank(pipeline::rank_layouts(fpdt_rank0_layout(config, s), config.model));
}

pipeline::LayoutShape fpdt_layout(const PlanConfig& config, const PlanShape& s) {
  return pipeline::layout_of_rank(fpdt_rank0_layout(config, s), config.model, fpdt_largest_rank(config, s));
}

bool fpdt_layout_countable(const PlanConfig& config, const PlanShape& s) {
  const pipeline::LayoutShape rank0 = fpdt_rank0_layout(config, s);
  for (int rank = 0; rank < s.P; ++rank)
    if (!pipeline::layout_fits_64_bits(pipeline::layout_of_rank(rank0, config.model, rank))) return false;
  return true;
}

// ---- assembly -------------------------------------------------------------------------------------------

namespace {

class Builder {
 public:
  void add(std::string name, std::string kind, Tier tier, Phase phase, double bytes, std::string formula) {
    if (bytes <= 0) return;
    components_.push_back({std::move(name), std::move(kind), tier, phase, bytes, std::move(formula)});
  }
  std::vector<Component> take() { return std::move(components_); }

 private:
  std::vector<Component> components_;
};

void add_model_states(Builder& out, const PlanConfig& config, const PlanShape& s) {
  std::string zero = "ZeRO-";
  zero.append(std::to_string(config.run.zero));
  out.add("weights", "model states", Tier::compute, Phase::always, weight_bytes(config, s),
          config.run.zero >= 3 ? "N·a/W" : "N·a");
  out.add("gradients (fp32)", "model states", Tier::compute, Phase::always, gradient_bytes(config, s),
          config.run.zero >= 2 ? "4·N/W" : "4·N");
  out.add(config.run.precision == Precision::bf16 ? "optimizer: Adam m, v + fp32 master" : "optimizer: Adam m, v",
          "model states", Tier::compute, Phase::always, optimizer_bytes(config, s),
          config.run.precision == Precision::bf16 ? (config.run.zero >= 1 ? "12·N/W" : "12·N")
                                          : (config.run.zero >= 1 ? "8·N/W" : "8·N"));
  out.add(zero.append(" gathered weight + gradient"), "model states", Tier::compute, Phase::always,
          zero3_gather_bytes(config, s), "2·a·largest weight");
}

// fpdt, ours: the model states of the pipeline's table (memory_layout.h's model_state_buffers, which
// pipeline::ModelStates allocates): fp32 weights whatever the precision, and in bf16 their bf16 working
// copy beside them (with, at stage 3, its slots' bf16 twins and the vectors' staging).
void add_fpdt_model_states(Builder& out, const PlanConfig& config, const PlanShape& s) {
  model::ModelConfig planned = config.model;
  if (planned.learned_positions()) planned.max_positions = static_cast<int>(position_table_rows(config));
  const model::ParameterLayout layout(planned);
  const pipeline::StateShape shape = pipeline::state_shape(config.run, static_cast<int>(s.W));
  const std::string shards = "Σ_units ⌈n/(1024·W)⌉·1024";
  for (const pipeline::StateSpec& spec : pipeline::model_state_buffers(layout, shape)) {
    const bool whole = spec.elements == layout.total_numel();
    std::string formula;
    switch (spec.id) {
      case pipeline::StateBuf::weights: formula = whole ? "4·N" : "4·" + shards; break;
      case pipeline::StateBuf::slot: formula = "largest unit in it: 4 bytes a value (ZeRO plan)"; break;
      case pipeline::StateBuf::weights_bf16: formula = whole ? "2·N" : "2·" + shards; break;
      case pipeline::StateBuf::slot_bf16: formula = "largest unit in its slot: 2 bytes a value"; break;
      case pipeline::StateBuf::vector_staging: formula = "2 · 4 · the largest unit's norm weights and biases"; break;
      default: formula = whole ? "4·N" : "4·" + shards; break;
    }
    out.add("model states: " + spec.name, "model states", spec.tier, Phase::always, d(spec.bytes()), formula);
  }
}

}  // namespace

std::vector<Component> memory_components(const PlanConfig& config, const PlanShape& s) {
  Builder out;
  if (config.run.mode == Mode::fpdt)
    add_fpdt_model_states(out, config, s);
  else
    add_model_states(out, config, s);
  const Tier chunk_tier = config.run.offload.kind == OffloadKind::none ? Tier::compute : Tier::offload;
  const std::string rope = "2·S·rotary_dim·4";

  if (config.run.mode == Mode::ulysses) {
    out.add("rotary tables (cos, sin)", "activations", Tier::compute, Phase::always, rope_table_bytes(s), rope);
    if (config.run.recompute == Recompute::layer) {
      out.add("activation checkpoints", "activations", chunk_tier, Phase::always, checkpoint_bytes(s), "L·a·h·T");
      out.add("layer activations (recomputed)", "activations", Tier::compute, Phase::token_backward,
              ulysses_layer_saved_bytes(s), "a·(4h + 3q + 2kv_heads + up + f)·T + 4·Hq·T");
      out.add("attention activations (recomputed)", "activations", Tier::compute, Phase::attention_backward,
              ulysses_attention_saved_bytes(s), "a·(2h + 3q + 2kv_heads)·T + 4·Hq·T");
    } else {
      out.add("saved activations, all layers", "activations", Tier::compute, Phase::always,
              d(s.L) * ulysses_layer_saved_bytes(s), "L·(saved per layer)");
    }
    out.add("layer forward (no grad)", "activations", Tier::compute, Phase::forward, ulysses_forward_bytes(s),
            "a·(2h + 3q + 2kv + 2kv_heads + 2·max(q, kv_heads) + up + f)·T");
    out.add("MLP backward temporaries", "activations", Tier::compute, Phase::token_backward,
            ulysses_mlp_backward_bytes(s), "a·(2h + f + up)·T");
    out.add("attention backward temporaries + all-to-all", "activations", Tier::compute, Phase::attention_backward,
            ulysses_attention_backward_bytes(s), "a·(3q + 2kv_heads + 2kv + 2h + 2·max(q, kv_heads))·T + 4q·T (+ 2aq·T GQA)");
    out.add("logits + cross-entropy (whole T)", "activations", Tier::compute, Phase::loss, ulysses_loss_bytes(s),
            "(a + 4 + 4 + 4)·V·T + 2·a·h·T");
    return out.take();
  }

  if (config.run.mode == Mode::fpdt_reference) {
    out.add("rotary tables (cos, sin)", "activations", Tier::compute, Phase::always, rope_table_bytes(s), rope);
    out.add("activation checkpoints", "activations", chunk_tier, Phase::always, checkpoint_bytes(s), "L·a·h·T");
    out.add("resident (T, h) tensors", "activations", Tier::compute, Phase::forward,
            reference_forward_resident_bytes(s), "a·(2h + 2q)·T");
    out.add("attention forward chunk buffers", "chunk buffers", Tier::compute, Phase::forward,
            reference_forward_chunk_bytes(s), "per c: 2a(q+2kv) + 2a·max(q,kv) + a(2q+4kv_heads) + 12q + 12Hq + 2aq");
    out.add("resident (T, h) tensors", "activations", Tier::compute, Phase::token_backward,
            reference_ffn_resident_bytes(s), "a·(4h + q)·T");
    out.add("chunked MLP backward + fp32 weight grads", "chunk buffers", Tier::compute, Phase::token_backward,
            reference_ffn_chunk_bytes(s), "3a·(up + f)·c/2 + 4·(h·up + f·h)");
    out.add("resident (T, h) tensors", "activations", Tier::compute, Phase::attention_backward,
            reference_attention_resident_bytes(s), "a·(5h + q)·T");
    out.add("attention backward chunk buffers", "chunk buffers", Tier::compute, Phase::attention_backward,
            reference_backward_chunk_bytes(s), "per c: a(9q + 8kv_heads + 2kv) + 4(3q + 2kv_heads + 2Hq) (+ 2aq GQA)");
    out.add("resident (T, h) tensors", "activations", Tier::compute, Phase::loss, reference_loss_resident_bytes(s),
            "3·a·h·T");
    out.add("chunked loss + fp32 head gradient", "chunk buffers", Tier::compute, Phase::loss,
            reference_loss_chunk_bytes(s), "(a + 12)·V·c + 4·V·h");
    out.add("q k v o, LSE, norm output of the layer", "offload chunks", chunk_tier, Phase::forward,
            reference_offload_forward_bytes(s), "(a·(2q + 2kv_heads + h) + 4·Hq)·T");
    out.add("q k v o, LSE, norm output, dq, dO of the layer", "offload chunks", chunk_tier,
            Phase::attention_backward, reference_offload_layer_bytes(s), "(a·(3q + 2kv_heads + h) + 4·(Hq + q))·T");
    out.add("final hidden (CPU copy)", "offload chunks", chunk_tier, Phase::loss, s.a * d(s.h) * d(s.T), "a·h·T");
    return out.take();
  }

  // fpdt, ours: one arena and one store, allocated once per sequence length (live all step).
  if (!fpdt_layout_countable(config, s)) throw_not_countable(config);
  const pipeline::LayoutShape layout = fpdt_layout(config, s);
  auto store = [&](pipeline::StoreGroup group) {
    return d(static_cast<int64_t>(pipeline::store_bytes(layout, group)));
  };
  const bool one_layer = layout.stored_layers == 1;
  out.add("layer inputs x (L + 1 layers)", "offload chunks", chunk_tier, Phase::always,
          store(pipeline::StoreGroup::inputs), "(L + 1)·a·h·T");
  if (layout.mlp_kept) {  // offload none, recompute none: the MLP's activations are kept too
    out.add("x_mid, q k v o, o (tokens), LSE, MLP activations, all layers", "offload chunks", chunk_tier,
            Phase::always, store(pipeline::StoreGroup::activations),
            "L·(a·(h + 3q + 2kv_heads + 3f) + 4·Hq)·T");
  } else {
    out.add(one_layer ? "x_mid, q k v o, o (tokens), LSE of the layer" : "x_mid, q k v o, o (tokens), LSE, all layers",
            "offload chunks", chunk_tier, Phase::always, store(pipeline::StoreGroup::activations),
            one_layer ? "(a·(h + 3q + 2kv_heads) + 4·Hq)·T" : "L·(a·(h + 3q + 2kv_heads) + 4·Hq)·T");
  }
  out.add("d_res, dO, delta (dq: in o's slots)", "offload chunks", chunk_tier, Phase::always,
          store(pipeline::StoreGroup::gradients), "(a·(h + q) + 4·Hq)·T");
  out.add("chunk buffers (one arena)", "chunk buffers", Tier::compute, Phase::always,
          d(static_cast<int64_t>(pipeline::chunk_arena_bytes(layout))),
          "per row of B·c: 4·(7h + 14q + 4kv + 8kv_heads + 6f + 6Hq + 4 + 2P) + 24; + 4·c·max(q, kv_heads) + "
          "4·V·n; a < 4 (bf16 store): + a·(4h + 8q + 6kv_heads (+ 3f kept)) per row, the bf16 twins");
  return out.take();
}

TierPeak tier_peak(const std::vector<Component>& components, Tier tier) {
  TierPeak peak;
  double phase_bytes[5] = {0, 0, 0, 0, 0};
  for (const Component& component : components) {
    if (component.tier != tier) continue;
    if (component.phase == Phase::always)
      peak.always_bytes += component.bytes;
    else
      phase_bytes[static_cast<int>(component.phase)] += component.bytes;
  }
  double largest = 0;
  for (int phase = 1; phase < 5; ++phase) {
    if (phase_bytes[phase] > largest) {
      largest = phase_bytes[phase];
      peak.phase = static_cast<Phase>(phase);
    }
  }
  peak.bytes = peak.always_bytes + largest;
  return peak;
}

}  // namespace fpdt::plan

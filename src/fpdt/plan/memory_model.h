// The analytic memory model of one rank: one function per component, each returning bytes, each
// derived once in docs/memory.md (section named in the comment). memory_components() assembles the
// components a mode keeps, tagged with the tier they live in and the phase of the step in which they
// are live; a tier's peak is everything live all step plus its largest phase (tier_peak).
//
// Vocabulary (DESIGN.md §5, per rank): T local tokens, c local chunk tokens, a bytes per stored
// activation element (2 bf16, 4 fp32); widths q = Hq·D, kv = Hkv·D (token-sharded), kv_heads =
// max(Hkv, P)·D (head-sharded, with replication). Head-sharded tensors of T tokens hold T · width
// elements per rank, the same count as the token-sharded ones.
//
// What is modelled is what the allocator sees: tensor bytes. The runtime's own memory (CUDA context,
// NCCL) is Hardware::reserved_bytes; allocator fragmentation is not modelled (docs/memory.md).
#pragma once

#include <string>
#include <vector>

#include "fpdt/pipeline/memory_layout.h"
#include "fpdt/plan/config.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::plan {

// When a component is live. `always`: the whole step (model states, checkpoints). The others are
// moments of one layer (or of the loss) and never overlap each other.
enum class Phase { always, forward, token_backward, attention_backward, loss };
std::string phase_name(Phase phase);

struct Component {
  std::string name;     // "activation checkpoints", "attention backward chunk buffers", ...
  std::string kind;     // "model states" | "activations" | "chunk buffers" | "offload chunks"
  Tier tier = Tier::compute;
  Phase phase = Phase::always;
  double bytes = 0;
  std::string formula;  // the formula in the plan's vocabulary, e.g. "L·a·h·T"
};

// ---- model states (docs/memory.md §3): of DeepSpeed (ulysses, fpdt-reference); our fpdt mode reads
// the pipeline's own table (pipeline/memory_layout.h's model_state_buffers, §7) ------------------------
// Weights in the training precision, sharded over W ranks from ZeRO-3: N·a / W.
double weight_bytes(const PlanConfig& config, const PlanShape& shape);
// fp32 gradients (the accumulators DESIGN.md §4 and DeepSpeed's bf16 path keep), sharded from ZeRO-2: 4N / W.
double gradient_bytes(const PlanConfig& config, const PlanShape& shape);
// Adam m and v (8 B) plus the fp32 master copy under bf16 (4 B), sharded from ZeRO-1.
double optimizer_bytes(const PlanConfig& config, const PlanShape& shape);
// ZeRO-3's gathered working set: the largest weight whole plus its gradient before the reduce-scatter,
// 2·a·largest (DeepSpeed's estimator: 4 · largest_layer_params under bf16). 0 below stage 3 or W = 1.
double zero3_gather_bytes(const PlanConfig& config, const PlanShape& shape);

// ---- shared by the modes (§4) -------------------------------------------------------------------------
// Layer inputs kept for recomputation: L·a·h·T.
double checkpoint_bytes(const PlanShape& shape);
// The rotary cos/sin tables Megatron-DeepSpeed builds for the whole sequence: 2·S·rotary_dim·4.
double rope_table_bytes(const PlanShape& shape);

// ---- ulysses (§5) ----------------------------------------------------------------------------------
// Everything one layer's recomputed forward saves for its backward, per local token × T.
double ulysses_layer_saved_bytes(const PlanShape& shape);
// The attention half of it (layer input, its norm, q k v o after the all-to-all, LSE, output).
double ulysses_attention_saved_bytes(const PlanShape& shape);
// MLP backward temporaries: gradients of the MLP output, activation and up projection.
double ulysses_mlp_backward_bytes(const PlanShape& shape);
// Attention backward temporaries: dO, dq dk dv on both sides of the all-to-all, flash attention's
// fp32 dq accumulator (and its GQA expansion of dk, dv), plus the all-to-all's two staging copies.
double ulysses_attention_backward_bytes(const PlanShape& shape);
// The no-grad forward of one layer (smaller than the backward; reported for completeness).
double ulysses_forward_bytes(const PlanShape& shape);
// The LM head + Megatron-DeepSpeed's sequence-parallel cross-entropy on T tokens: bf16 logits, their
// fp32 copy, softmax and log-softmax (14·V per token under bf16) plus the final hidden and its norm.
double ulysses_loss_bytes(const PlanShape& shape);

// ---- fpdt-reference (§6) -----------------------------------------------------------------------------
// (T, ·) tensors the reference keeps in the compute tier at each moment of a layer.
double reference_forward_resident_bytes(const PlanShape& shape);     // a·(2h + 2q)·T
double reference_ffn_resident_bytes(const PlanShape& shape);         // a·(4h + q)·T
double reference_attention_resident_bytes(const PlanShape& shape);   // a·(5h + q)·T
double reference_loss_resident_bytes(const PlanShape& shape);        // 3·a·h·T
// Chunk buffers of its attention forward and backward loops (current + prefetched chunks).
double reference_forward_chunk_bytes(const PlanShape& shape);
double reference_backward_chunk_bytes(const PlanShape& shape);
// Its chunked MLP backward (c/2 tokens) and the fp32 weight-gradient accumulators it allocates.
double reference_ffn_chunk_bytes(const PlanShape& shape);
// Its chunked loss (c tokens of logits in bf16 and three fp32 copies) and fp32 head-weight gradient.
double reference_loss_chunk_bytes(const PlanShape& shape);
// Offloaded chunks of the layer in flight (q k v o, LSE, norm output, dq, dO) and the loss's copy.
double reference_offload_layer_bytes(const PlanShape& shape);
double reference_offload_forward_bytes(const PlanShape& shape);

// ---- fpdt, ours (§7): the pipeline's own memory table (pipeline/memory_layout.h) at the plan's
// element size, so the plan, the dry run and the pipeline cannot drift apart. The pipeline allocates
// once per sequence length — one compute-tier arena of chunk buffers and one offload store — so these
// components are live all step. A chunk holds the B sequences of a micro-batch together: the plan's
// c = B·C/P token rows and T = B·u·C/P (the run spec's chunks, PlanShape::chunk_plan). The layout is the
// largest rank's (pipeline::largest_rank): ranks differ when P does not divide the heads, and the plan's
// memory is that rank's.
pipeline::LayoutShape fpdt_layout(const PlanConfig& config, const PlanShape& shape);
// That rank.
int fpdt_largest_rank(const PlanConfig& config, const PlanShape& shape);
// Whether that table can be laid out at all on every rank: every size in 64 bits (pipeline::layout_fits_64_bits).
// memory_components refuses the fpdt mode where it cannot.
bool fpdt_layout_countable(const PlanConfig& config, const PlanShape& shape);

// Every component `config.mode` keeps, with its tier and phase.
std::vector<Component> memory_components(const PlanConfig& config, const PlanShape& shape);

struct TierPeak {
  double bytes = 0;        // always-live + the largest phase
  double always_bytes = 0;
  Phase phase = Phase::always;  // the phase that sets the peak
};
TierPeak tier_peak(const std::vector<Component>& components, Tier tier);

}  // namespace fpdt::plan

// What `fpdt plan` is asked about: a model, a sequence, a parallel layout, a mode (ulysses, the paper's
// FPDT implementation, or ours), recomputation, offload tier, ZeRO stage and precision. derive_shape()
// validates it once, with one sentence per impossible input, and turns it into the per-rank numbers
// every formula of the memory and cost models reads. Nothing here knows about hardware.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/model/config.h"
#include "fpdt/pipeline/chunk_plan.h"
#include "fpdt/pipeline/run_spec.h"

namespace fpdt::plan {

// The run spec's types (pipeline/run_spec.h), as `fpdt train` has them. Mode: ulysses plans
// DeepSpeed-Ulysses + ZeRO + activation checkpointing (Megatron-DeepSpeed's GPT path); fpdt_reference
// the paper's implementation (DeepSpeed fpdt_layer.py): chunked attention with offload and double
// buffering, chunked MLP and loss, but several (T, h) tensors resident; fpdt ours (DESIGN.md §1):
// everything of length T streamed through the offload tier. The offload tier holds chunks (and
// activation checkpoints); none = the compute tier itself.
using pipeline::Mode;
using pipeline::OffloadKind;
using pipeline::Precision;
using pipeline::Recompute;
// model = as the model says (GPT: a learned table of max_positions rows; Llama: rotary);
// rope = rotary positions, no table; learned = a learned table of exactly S rows and no rotary
// (Megatron's GPT with --max-position-embeddings = --seq-length). docs/memory.md §10 says which the
// paper's runs used.
enum class Positions { model, rope, learned };

std::string positions_name(Positions positions);
std::vector<std::string> positions_spellings();  // the accepted spellings, for the option
// Inverse; throws fpdt::Error listing the accepted spellings.
Positions parse_positions(const std::string& text);

// The global chunk the paper's implementation uses unless told otherwise (DeepSpeed's
// ds_sequence_parallel_fpdt_chunk_size default).
constexpr int64_t kReferenceChunkTokens = 65536;
// The smallest local chunk the fpdt mode chooses on its own: one 128-token attention tile per rank
// (flash-attention tiles are 64–128 rows; below one tile per rank the kernels idle).
constexpr int64_t kMinLocalChunkTokens = 128;

// The run `fpdt plan` asks about unless told otherwise: the paper's setting — Llama-3-8B on 1M tokens,
// our pipeline with a RAM offload tier, activation checkpointing, ZeRO-3 and bf16 — a chunk chosen for it (chunk_tokens and
// chunks 0: fpdt the smallest chunk whose prefetch hides, fpdt-reference kReferenceChunkTokens).
inline pipeline::RunSpec default_plan_run() {
  pipeline::RunSpec run;
  run.model = "llama3-8b";
  run.seq_tokens = int64_t{1} << 20;
  run.chunks = 0;
  run.recompute = Recompute::layer;
  run.zero = 3;
  run.precision = Precision::bf16;
  return run;
}

struct PlanConfig {
  model::ModelConfig model;
  Positions positions = Positions::model;
  // S, P, dp (ZeRO shards over dp · sp ranks), B (sequences per step and rank group), C or u, mode,
  // recompute, the offload tier (its directory unused), ZeRO stage and optimizer offload, and the
  // precision: the storage of weights and activations, 2 bytes (bf16) or 4 (fp32).
  pipeline::RunSpec run = default_plan_run();
};

// Per-rank numbers, derived once (vocabulary of DESIGN.md §5). Widths are elements per token.
struct PlanShape {
  int64_t S = 0;        // global tokens per sequence
  int64_t B = 0;        // sequences
  int64_t P = 0;        // Ulysses ranks
  int64_t W = 0;        // ZeRO ranks: dp · sp
  int64_t T = 0;        // local tokens of a rank: B · u·C / P (the sequence padded to whole chunks)
  int64_t C = 0;        // global chunk tokens (0 for ulysses)
  int64_t c = 0;        // local chunk tokens: B · C / P; a head-sharded chunk holds c · width elements
  int64_t u = 0;        // chunks per rank: ⌈S / C⌉
  pipeline::ChunkPlan chunk_plan;  // rank 0's chunks, as the run spec cuts the sequence (ulysses: one)
  int64_t L = 0, h = 0, f = 0, V = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t q = 0;        // Hq · D
  int64_t kv = 0;       // Hkv · D, token-sharded k (or v) width
  // Ulysses' head split (pipeline/ulysses.h), the largest rank's: its widths after the all-to-all, per local token.
  int64_t q_heads = 0;  // P · ⌈Hq/P⌉ · D (= q when P divides Hq)
  int64_t kv_heads = 0; // P · max_r K_r · D: max(Hkv, P) · D on an even split or with kv heads replicated
  double imbalance = 1; // attention's: ⌈Hq/P⌉ / (Hq/P), the largest rank's heads over the mean
  double all_to_all_elements = 0;  // the most a rank sends per local token and layer, forward
  int64_t mlp_up = 0;   // width of the MLP's first projection: f (GELU) or 2f (SwiGLU gate | up)
  bool gated_mlp = false;
  int64_t rotary_dim = 0;   // 0 = no rotary positions
  double a = 0;         // bytes of one stored activation element: 2 (bf16) or 4 (fp32)
  int64_t params = 0;           // N, parameters as planned (see plan_parameter_count)
  int64_t largest_tensor = 0;   // parameters of the largest single weight (ZeRO-3 gathers it whole)
  int64_t matmul_params_per_layer = 0;  // weights a token multiplies with in one layer
};

// Rows of the learned position table as planned: max_positions (model, GPT), S (learned) or 0.
int64_t position_table_rows(const PlanConfig& config);
// Parameters counted by the plan: the model's, with its position table replaced by
// position_table_rows(config) · h.
int64_t plan_parameter_count(const PlanConfig& config);

// The model with Hq (and Hkv for a model without grouped-query attention) set to `heads`, head_dim
// = h / heads. Throws fpdt::Error when h is not divisible or the result is invalid.
model::ModelConfig with_heads(const model::ModelConfig& config, int heads);

// The smallest chunk C = S / k (k a whole number of chunks) that is a multiple of P and at least
// `at_least` tokens; 0 when there is none (at_least > S).
int64_t smallest_chunk_at_least(int64_t S, int64_t P, double at_least);

// Validates everything that makes a plan impossible and returns its shape. Throws fpdt::Error
// ("[plan] ...; hint: ...") for: non-positive sizes, more ranks P than heads, chunks the run spec refuses (pipeline::run_chunk_plan, as `fpdt train` does), a ZeRO
// stage outside 0..3, S past a learned position table, and combinations the mode does not have.
// chunk_tokens or chunks must already be resolved (non-zero) for the fpdt modes.
PlanShape derive_shape(const PlanConfig& config);

}  // namespace fpdt::plan

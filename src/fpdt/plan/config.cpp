// Plan configuration: names, parsing and the one validation pass (see config.h).
#include "fpdt/plan/config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"
#include "fpdt/base/spellings.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/pipeline/ulysses.h"

namespace fpdt::plan {

namespace {

constexpr const char* kModule = "plan";

std::string str(int64_t value) { return std::to_string(value); }

// "what: got" with append() (GCC 12's -Wrestrict misfires on "literal" + std::string at -O3).
std::string join(std::initializer_list<std::string> parts) {
  std::string text;
  for (const std::string& part : parts) text.append(part);
  return text;
}

void require_positive(int64_t value, const std::string& what, const std::string& hint) {
  if (value <= 0) throw Error(kModule, join({what, " must be positive, got ", str(value)}), hint);
}

// The positions' spellings, once: names, parsing and the option's choices all read this table.
constexpr Spelling<Positions> kPositions[] = {{"model", Positions::model}, {"rope", Positions::rope}, {"learned", Positions::learned}};

}  // namespace

std::string positions_name(Positions positions) { return spelling_of(kPositions, positions); }
std::vector<std::string> positions_spellings() { return spellings_of(kPositions); }
Positions parse_positions(const std::string& text) { return parse_spelling(kPositions, text, kModule, "positions"); }

int64_t position_table_rows(const PlanConfig& config) {
  switch (config.positions) {
    case Positions::model: return config.model.learned_positions() ? config.model.max_positions : 0;
    case Positions::rope: return 0;
    case Positions::learned: return config.run.seq_tokens;
  }
  return 0;
}

int64_t plan_parameter_count(const PlanConfig& config) {
  int64_t count = config.model.parameter_count();
  if (config.model.learned_positions()) count -= config.model.max_positions * config.model.hidden;
  return count + position_table_rows(config) * config.model.hidden;
}

model::ModelConfig with_heads(const model::ModelConfig& config, int heads) {
  if (heads <= 0) throw Error(kModule, join({"--heads must be positive, got ", str(heads)}));
  if (config.hidden % heads != 0)
    throw Error(kModule, join({"hidden size ", str(config.hidden), " of '", config.name, "' is not divisible by ",
                               str(heads), " heads"}),
                "choose --heads dividing the hidden size");
  model::ModelConfig changed = config;
  const bool grouped = config.kv_heads != config.heads;
  changed.heads = heads;
  changed.head_dim = config.hidden / heads;
  if (!grouped) changed.kv_heads = heads;
  if (changed.uses_rope()) changed.rotary_dim = changed.head_dim;
  try {
    changed.validate();
  } catch (const Error& error) {  // its message names the model's fields ("rotary dims 1"), not the option
    throw Error(kModule,
                join({"--heads ", str(heads), " gives '", config.name, "' a head_dim of ", str(changed.head_dim),
                      " (hidden ", str(config.hidden), ", ", str(changed.kv_heads), " key/value heads), which ",
                      "it cannot have: ", error.message()}),
                "choose --heads dividing the hidden size into even head dims and a multiple of the key/value heads");
  }
  return changed;
}

int64_t smallest_chunk_at_least(int64_t S, int64_t P, double at_least) {
  if (S <= 0 || P <= 0 || at_least > static_cast<double>(S)) return 0;
  // C grows as k shrinks: walk k down from S / at_least (bounded, so any S stays cheap).
  const int64_t k_start = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(S) / std::max(at_least, 1.0)));
  for (int64_t k = k_start; k >= 1 && k > k_start - 10000000; --k)
    if (S % k == 0 && (S / k) % P == 0 && static_cast<double>(S / k) >= at_least) return S / k;
  return 0;
}

PlanShape derive_shape(const PlanConfig& config) {
  const model::ModelConfig& m = config.model;
  m.validate();
  require_positive(config.run.seq_tokens, "sequence length (--seq)", "give the global tokens of one sequence, e.g. 1M");
  require_positive(config.run.sp, "sequence-parallel degree (--sp)", "use 1 for a single rank");
  require_positive(config.run.dp, "data-parallel degree (--dp)", "use 1 without data parallelism");
  require_positive(config.run.batch_size, "micro-batch (--batch)", "use 1 sequence per step");
  if (config.run.chunk_tokens < 0)
    throw Error(kModule, join({"chunk size (--chunk-tokens) must be positive, got ", str(config.run.chunk_tokens)}),
                "give global tokens per chunk, e.g. 64K, or auto");
  if (config.run.zero < 0 || config.run.zero > 3)
    throw Error(kModule, join({"ZeRO stage must be 0, 1, 2 or 3, got ", str(config.run.zero)}));
  if (config.run.offload_optimizer && (config.run.mode != Mode::fpdt || config.run.zero < 2))
    throw Error(kModule, "an offloaded optimizer is planned for --mode fpdt with --zero 2 or 3",
                "add --zero 2 (or 3), or drop --offload-optimizer");

  const int64_t S = config.run.seq_tokens, P = config.run.sp;
  if (P > m.heads)
    throw Error(kModule,
                join({"--sp ", str(P), " is more sequence-parallel ranks than the ", str(m.heads), " attention heads of '",
                      m.name, "'"}),
                "Ulysses gives each rank at least one head; choose --sp of at most " + str(m.heads) +
                    " (or --heads to plan another head count)");
  if (m.learned_positions() && config.positions == Positions::model && S > m.max_positions)
    throw Error(kModule,
                join({"sequence length ", str(S), " exceeds the ", str(m.max_positions), " learned positions of '",
                      m.name, "'"}),
                "use a shorter --seq, or --positions rope to plan rotary positions instead of the table");

  int64_t batch_tokens = 0;
  if (!checked_mul(batch_tokens, config.run.batch_size, S))
    throw Error(kModule, join({"--batch ", str(config.run.batch_size), " x --seq ", str(S), " tokens do not fit 64-bit counts"}),
                "lower --batch or --seq");
  // The chunks, cut by the run spec's one rule as `fpdt train` cuts them (ulysses: the sequence as one).
  const pipeline::ChunkPlan chunks = pipeline::run_chunk_plan(kModule, config.run);
  if (position_table_rows(config) > std::numeric_limits<int32_t>::max())
    throw Error(kModule, join({"a learned position table of ", str(position_table_rows(config)), " rows (--seq) exceeds 2^31 - 1"}),
                "lower --seq, or plan rotary positions (--positions rope)");

  PlanShape shape;
  shape.S = S;
  shape.B = config.run.batch_size;
  shape.P = P;
  shape.W = config.run.dp * P;
  shape.T = config.run.batch_size * chunks.local_tokens();
  shape.chunk_plan = chunks;
  shape.L = m.layers;
  shape.h = m.hidden;
  shape.f = m.ffn_hidden;
  shape.V = m.vocab_size;
  shape.Hq = m.heads;
  shape.Hkv = m.kv_heads;
  shape.D = m.head_dim;
  shape.q = int64_t{m.heads} * m.head_dim;
  shape.kv = int64_t{m.kv_heads} * m.head_dim;
  for (int rank = 0; rank < P; ++rank) {
    const pipeline::HeadSharding sharding =
        pipeline::make_head_sharding(m.heads, m.kv_heads, static_cast<int>(P), rank);
    shape.q_heads = std::max<int64_t>(shape.q_heads, P * sharding.local_q_heads * m.head_dim);
    shape.kv_heads = std::max<int64_t>(shape.kv_heads, P * sharding.local_kv_heads * m.head_dim);
    shape.imbalance = sharding.imbalance();
    shape.all_to_all_elements = std::max(shape.all_to_all_elements, sharding.forward_elements_per_token(m.head_dim));
  }
  shape.gated_mlp = m.family == model::Family::llama;
  shape.mlp_up = shape.gated_mlp ? 2 * shape.f : shape.f;
  shape.rotary_dim = config.positions == Positions::learned ? 0
                     : m.uses_rope()                         ? m.rotary_dim
                     : config.positions == Positions::rope   ? m.head_dim
                                                             : 0;
  shape.a = config.run.precision == Precision::bf16 ? 2.0 : 4.0;
  shape.params = plan_parameter_count(config);
  shape.matmul_params_per_layer = shape.h * (shape.q + 2 * shape.kv) + shape.q * shape.h + shape.h * shape.mlp_up +
                                  shape.f * shape.h;
  shape.largest_tensor = std::max({shape.V * shape.h, shape.h * (shape.q + 2 * shape.kv), shape.h * shape.mlp_up});
  shape.largest_tensor = std::max(shape.largest_tensor, position_table_rows(config) * shape.h);

  if (config.run.mode == Mode::ulysses) {
    if (config.run.offload.kind == OffloadKind::disk)
      throw Error(kModule, "ulysses keeps its activation checkpoints in GPU or host memory, not on disk",
                  "use --offload ram (checkpoints in host memory) or none");
    return shape;
  }
  if (config.run.mode == Mode::fpdt_reference) {
    if (config.run.recompute == Recompute::none)
      throw Error(kModule, "the paper's implementation always re-runs each layer (activation checkpointing)",
                  "use --recompute layer with fpdt-reference, or --mode fpdt for --recompute none");
    if (config.run.offload.kind == OffloadKind::disk)
      throw Error(kModule, "the paper's implementation offloads to host memory only", "use --offload ram or none");
  }
  shape.C = chunks.chunk_tokens;
  shape.c = config.run.batch_size * chunks.local_chunk_tokens;
  shape.u = chunks.chunks;
  return shape;
}

}  // namespace fpdt::plan

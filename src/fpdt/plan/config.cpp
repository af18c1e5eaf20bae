// Plan configuration: names, parsing and the one validation pass (see config.h).
#include "fpdt/plan/config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"

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

// Valid chunks next to `chunk` for a hint: C = S / k (k chunks) with C a multiple of P. Walks k
// (at most a million steps each way), so S of any size stays cheap.
std::string chunk_hint(int64_t S, int64_t P, int64_t chunk) {
  const auto valid = [&](int64_t k) { return S % k == 0 && (S / k) % P == 0; };
  const int64_t k_near = std::max<int64_t>(1, S / std::max<int64_t>(chunk, 1));
  int64_t below = 0, above = 0;  // the largest valid C <= chunk, the smallest valid C >= chunk
  for (int64_t k = k_near; k <= S && k < k_near + 1000000 && below == 0; ++k)
    if (valid(k) && S / k <= chunk) below = S / k;
  for (int64_t k = k_near; k >= 1 && k > k_near - 1000000 && above == 0; --k)
    if (valid(k) && S / k >= chunk) above = S / k;
  std::string hint = "a chunk must be a multiple of --sp and divide --seq";
  if (below > 0) hint.append(join({"; try --chunk-tokens ", str(below)}));
  if (above > 0 && above != below) hint.append(join({below > 0 ? " or " : "; try --chunk-tokens ", str(above)}));
  return hint;
}

}  // namespace

namespace {

// Each enum's spellings, once: names, parsing and the options' accepted words all read these.
template <class E>
struct Word {
  const char* text;
  E value;
};
constexpr Word<Mode> kModes[] = {{"ulysses", Mode::ulysses}, {"fpdt-reference", Mode::fpdt_reference}, {"fpdt", Mode::fpdt}};
constexpr Word<Recompute> kRecomputes[] = {{"none", Recompute::none}, {"layer", Recompute::layer}};
constexpr Word<OffloadTier> kOffloads[] = {{"none", OffloadTier::none}, {"ram", OffloadTier::ram}, {"disk", OffloadTier::disk}};
constexpr Word<Positions> kPositions[] = {{"model", Positions::model}, {"rope", Positions::rope}, {"learned", Positions::learned}};
constexpr Word<DType> kPrecisions[] = {{"bf16", DType::bf16}, {"fp32", DType::f32}};

template <class E, size_t N>
std::string name_of(const Word<E> (&words)[N], E value) {
  for (const Word<E>& word : words)
    if (word.value == value) return word.text;
  return "?";
}

template <class E, size_t N>
std::vector<std::string> words_of(const Word<E> (&words)[N]) {
  std::vector<std::string> texts;
  for (const Word<E>& word : words) texts.push_back(word.text);
  return texts;
}

// "a, b or c"
template <class E, size_t N>
std::string listed(const Word<E> (&words)[N]) {
  std::string text;
  for (size_t i = 0; i < N; ++i) text.append(i == 0 ? "" : i + 1 == N ? " or " : ", ").append(words[i].text);
  return text;
}

template <class E, size_t N>
E parse_word(const Word<E> (&words)[N], const std::string& text, const char* what) {
  for (const Word<E>& word : words)
    if (text == word.text) return word.value;
  throw Error(kModule, join({"unknown ", what, " '", text, "'"}), join({"use ", listed(words)}));
}

}  // namespace

std::string mode_name(Mode mode) { return name_of(kModes, mode); }
std::string recompute_name(Recompute recompute) { return name_of(kRecomputes, recompute); }
std::string offload_name(OffloadTier offload) { return name_of(kOffloads, offload); }
std::string positions_name(Positions positions) { return name_of(kPositions, positions); }
std::string precision_name(DType precision) { return name_of(kPrecisions, precision); }

std::vector<std::string> mode_words() { return words_of(kModes); }
std::vector<std::string> recompute_words() { return words_of(kRecomputes); }
std::vector<std::string> offload_words() { return words_of(kOffloads); }
std::vector<std::string> positions_words() { return words_of(kPositions); }
std::vector<std::string> precision_words() { return words_of(kPrecisions); }

Mode parse_mode(const std::string& text) { return parse_word(kModes, text, "mode"); }
Recompute parse_recompute(const std::string& text) { return parse_word(kRecomputes, text, "recompute mode"); }
OffloadTier parse_offload(const std::string& text) {
  // disk:DIR names the training run's directory; the plan needs only the tier.
  return parse_word(kOffloads, text.starts_with("disk:") ? std::string("disk") : text, "offload tier");
}
Positions parse_positions(const std::string& text) { return parse_word(kPositions, text, "positions"); }
DType parse_precision(const std::string& text) { return parse_word(kPrecisions, text, "precision"); }

int64_t position_table_rows(const PlanConfig& config) {
  switch (config.positions) {
    case Positions::model: return config.model.learned_positions() ? config.model.max_positions : 0;
    case Positions::rope: return 0;
    case Positions::learned: return config.seq_tokens;
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
  changed.validate();
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
  require_positive(config.seq_tokens, "sequence length (--seq)", "give the global tokens of one sequence, e.g. 1M");
  require_positive(config.sp, "sequence-parallel degree (--sp)", "use 1 for a single rank");
  require_positive(config.dp, "data-parallel degree (--dp)", "use 1 without data parallelism");
  require_positive(config.micro_batch, "micro-batch (--batch)", "use 1 sequence per step");
  if (config.chunk_tokens < 0)
    throw Error(kModule, join({"chunk size (--chunk-tokens) must be positive, got ", str(config.chunk_tokens)}),
                "give global tokens per chunk, e.g. 64K, or auto");
  if (config.zero_stage < 0 || config.zero_stage > 3)
    throw Error(kModule, join({"ZeRO stage must be 0, 1, 2 or 3, got ", str(config.zero_stage)}));
  if (config.offload_optimizer && (config.mode != Mode::fpdt || config.zero_stage < 2))
    throw Error(kModule, "an offloaded optimizer is planned for --mode fpdt with --zero 2 or 3",
                "add --zero 2 (or 3), or drop --offload-optimizer");
  if (config.precision != DType::bf16 && config.precision != DType::f32)
    throw Error(kModule, "precision must be bf16 or fp32");

  const int64_t S = config.seq_tokens, P = config.sp;
  if (S % P != 0)
    throw Error(kModule, join({"sequence length ", str(S), " is not divisible by --sp ", str(P)}),
                "each rank holds S / P tokens; choose S a multiple of P");
  if (m.heads % P != 0)
    throw Error(kModule,
                join({"'", m.name, "' has ", str(m.heads), " attention heads, not divisible by --sp ", str(P)}),
                "Ulysses gives each rank Hq / P heads; choose --sp dividing the head count (or --heads to plan "
                "another head count)");
  if (m.kv_heads % P != 0 && P % m.kv_heads != 0)
    throw Error(kModule,
                join({"'", m.name, "' has ", str(m.kv_heads), " key/value heads: neither divisible by --sp ", str(P),
                      " nor dividing it"}),
                "kv heads are split over ranks, or replicated when P is a multiple of them");
  if (m.learned_positions() && config.positions == Positions::model && S > m.max_positions)
    throw Error(kModule,
                join({"sequence length ", str(S), " exceeds the ", str(m.max_positions), " learned positions of '",
                      m.name, "'"}),
                "use a shorter --seq, or --positions rope to plan rotary positions instead of the table");

  int64_t batch_tokens = 0;
  if (!checked_mul(batch_tokens, config.micro_batch, S))
    throw Error(kModule, join({"--batch ", str(config.micro_batch), " x --seq ", str(S), " tokens do not fit 64-bit counts"}),
                "lower --batch or --seq");
  if (position_table_rows(config) > std::numeric_limits<int32_t>::max())
    throw Error(kModule, join({"a learned position table of ", str(position_table_rows(config)), " rows (--seq) exceeds 2^31 - 1"}),
                "lower --seq, or plan rotary positions (--positions rope)");

  PlanShape shape;
  shape.S = S;
  shape.B = config.micro_batch;
  shape.P = P;
  shape.W = config.dp * P;
  shape.T = batch_tokens / P;
  shape.L = m.layers;
  shape.h = m.hidden;
  shape.f = m.ffn_hidden;
  shape.V = m.vocab_size;
  shape.Hq = m.heads;
  shape.Hkv = m.kv_heads;
  shape.D = m.head_dim;
  shape.q = int64_t{m.heads} * m.head_dim;
  shape.kv = int64_t{m.kv_heads} * m.head_dim;
  shape.kv_heads = std::max<int64_t>(m.kv_heads, P) * m.head_dim;
  shape.gated_mlp = m.family == model::Family::llama;
  shape.mlp_up = shape.gated_mlp ? 2 * shape.f : shape.f;
  shape.rotary_dim = config.positions == Positions::learned ? 0
                     : m.uses_rope()                         ? m.rotary_dim
                     : config.positions == Positions::rope   ? m.head_dim
                                                             : 0;
  shape.a = static_cast<double>(dtype_size(config.precision));
  shape.params = plan_parameter_count(config);
  shape.matmul_params_per_layer = shape.h * (shape.q + 2 * shape.kv) + shape.q * shape.h + shape.h * shape.mlp_up +
                                  shape.f * shape.h;
  shape.largest_tensor = std::max({shape.V * shape.h, shape.h * (shape.q + 2 * shape.kv), shape.h * shape.mlp_up});
  shape.largest_tensor = std::max(shape.largest_tensor, position_table_rows(config) * shape.h);

  if (config.mode == Mode::ulysses) {
    if (config.offload == OffloadTier::disk)
      throw Error(kModule, "ulysses keeps its activation checkpoints in GPU or host memory, not on disk",
                  "use --offload ram (checkpoints in host memory) or none");
    return shape;
  }
  if (config.mode == Mode::fpdt_reference) {
    if (config.recompute == Recompute::none)
      throw Error(kModule, "the paper's implementation always re-runs each layer (activation checkpointing)",
                  "use --recompute layer with fpdt-reference, or --mode fpdt for --recompute none");
    if (config.offload == OffloadTier::disk)
      throw Error(kModule, "the paper's implementation offloads to host memory only", "use --offload ram or none");
  }
  const int64_t C = config.chunk_tokens;
  FPDT_ASSERT(C > 0);  // resolved by the caller (make_plan)
  if (C % P != 0)
    throw Error(kModule, join({"chunk of ", str(C), " tokens does not split over --sp ", str(P), " ranks"}),
                chunk_hint(S, P, C));
  if (S % C != 0)
    throw Error(kModule, join({"chunk of ", str(C), " tokens does not divide the sequence of ", str(S), " tokens"}),
                chunk_hint(S, P, std::min(C, S)));
  shape.C = C;
  shape.c = config.micro_batch * C / P;
  shape.u = S / C;
  return shape;
}

}  // namespace fpdt::plan

// The pipeline's memory table (see memory_layout.h).
#include "fpdt/pipeline/memory_layout.h"

#include <algorithm>
#include <optional>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"
#include "fpdt/kernels/device_memory.h"
#include "fpdt/pipeline/double_buffer.h"

namespace fpdt::pipeline {

namespace {
constexpr int64_t kHeadLogitsBytes = int64_t{32} << 20;  // the LM head never holds more logits than this
constexpr int64_t kWeightBytes = sizeof(float);  // a stored weight: fp32 in both precisions (the masters)
}  // namespace

int64_t element_bytes(Element element, const LayoutShape& shape) {
  switch (element) {
    case Element::activation: return shape.activation_bytes;
    case Element::fp32: return 4;
    case Element::fp64: return 8;
    case Element::int32: return 4;
    case Element::int64: return 8;
  }
  return 0;
}

int64_t BufferSpec::bytes(const LayoutShape& shape) const {
  return static_cast<int64_t>(kernels::transfer_bytes(static_cast<size_t>(elements * element_bytes(element, shape))));
}

int64_t ArraySpec::slot_bytes(const LayoutShape& shape) const {
  return static_cast<int64_t>(kernels::transfer_bytes(static_cast<size_t>(elements * element_bytes(element, shape))));
}

LayoutShape layout_shape(const model::ModelConfig& config, const HeadSharding& sharding, const ChunkPlan& plan,
                         int64_t batch, int64_t stored_layers, int64_t activation_bytes, bool mlp_kept,
                         bool backward) {
  LayoutShape shape;
  shape.B = batch;
  shape.c = plan.local_chunk_tokens;
  shape.u = plan.chunks;
  shape.L = config.layers;
  shape.stored_layers = stored_layers;
  shape.h = config.hidden;
  shape.f = config.ffn_hidden;
  shape.V = config.vocab_size;
  shape.D = config.head_dim;
  shape.q = config.q_dim();
  shape.kv = config.kv_dim();
  shape.local_q_heads = sharding.local_q_heads;
  shape.local_kv_heads = sharding.local_kv_heads;
  shape.P = sharding.ranks;
  shape.kv_send_heads = sharding.kv_send_heads();
  shape.activation_bytes = activation_bytes;
  shape.mlp_kept = mlp_kept;
  shape.backward = backward;
  return shape;
}

LayoutShape layout_of_rank(LayoutShape shape, const model::ModelConfig& config, int rank) {
  const HeadSharding sharding = make_head_sharding(config.heads, config.kv_heads, static_cast<int>(shape.P), rank);
  shape.local_q_heads = sharding.local_q_heads;
  shape.local_kv_heads = sharding.local_kv_heads;
  return shape;
}

std::vector<RankLayout> rank_layouts(const LayoutShape& shape, const model::ModelConfig& config) {
  std::vector<RankLayout> ranks;
  for (int rank = 0; rank < shape.P; ++rank) {
    const LayoutShape mine = layout_of_rank(shape, config, rank);
    ranks.push_back({rank, static_cast<int>(mine.local_q_heads), static_cast<int>(mine.local_kv_heads),
                     kernels::transfer_bytes(chunk_arena_bytes(mine)), store_bytes(mine)});
  }
  return ranks;
}

int largest_rank(const std::vector<RankLayout>& ranks) {
  int largest = 0;
  for (const RankLayout& rank : ranks)
    if (rank.arena_bytes + rank.store_bytes > ranks[largest].arena_bytes + ranks[largest].store_bytes) largest = rank.rank;
  return largest;
}

int64_t stored_activation_bytes(kernels::Precision precision) {
  return precision == kernels::Precision::bf16 ? 2 : 4;
}

bool keep_mlp_activations(bool store_resident, Recompute recompute) {
  return store_resident && recompute == Recompute::none;
}

int64_t head_rows(const LayoutShape& s) {
  const int64_t by_budget = s.V > 0 ? kHeadLogitsBytes / (4 * s.V) : 1;
  return std::clamp<int64_t>(by_budget, 1, std::max<int64_t>(s.rows(), 1));
}

std::vector<BufferSpec> chunk_buffers(const LayoutShape& s) {
  const int64_t n = s.rows(), C_rows = s.P * n;  // token rows; head-sharded rows B·C
  const int64_t qh = n * s.q_heads_width(), kvh = n * s.kv_heads_width(), lse = n * s.local_q_heads * s.P;
  const int64_t head = head_rows(s);
  const int64_t back = s.backward ? 1 : 0;  // the backward's buffers: none in a forward-only layout
  const int64_t packed = s.activation_bytes < 4 ? 1 : 0;  // staging twins: a bf16 store only
  const int64_t mlp = s.mlp_kept ? 1 : 0;                 // the MLP's activations go through the store
  using E = Element;
  std::vector<BufferSpec> table = {
      {Buf::tokens, "tokens", "(B·c)", E::int32, n},
      {Buf::targets, "targets", "(B·c)", E::int32, n},
      {Buf::loss_mask, "loss_mask", "(B·c)", E::fp32, n},
      {Buf::positions, "positions", "(B·c) global", E::int64, n},
      {Buf::position_ids, "position_ids", "(B·c)", E::int32, n},
      {Buf::q_docs, "q_docs", "(B, C)", E::int32, C_rows},
      {Buf::kv_docs, "kv_docs", "(B, C)", E::int32, C_rows},
      {Buf::x, "x", "(B·c, h)", E::fp32, n * s.h},
      {Buf::x_mid, "x_mid", "(B·c, h)", E::fp32, n * s.h},
      {Buf::x_out, "x_out", "(B·c, h)", E::fp32, n * s.h},
      {Buf::norm, "norm", "(B·c, h)", E::fp32, n * s.h},
      {Buf::norm_mean, "norm_mean", "(B·c)", E::fp32, n},
      {Buf::norm_rstd, "norm_rstd", "(B·c)", E::fp32, n},
      {Buf::q_local, "q_local", "(B·c, Hq·D)", E::fp32, n * s.q},
      {Buf::k_local, "k_local", "(B·c, Hkv·D)", E::fp32, n * s.kv},
      {Buf::v_local, "v_local", "(B·c, Hkv·D)", E::fp32, n * s.kv},
      {Buf::q_head, "q_head", "(B, C, H_r, D)", E::fp32, qh},
      {Buf::k_head, "k_head", "(B, C, K_r, D)", E::fp32, kvh},
      {Buf::v_head, "v_head", "(B, C, K_r, D)", E::fp32, kvh},
      {Buf::o_head, "o_head", "(B, C, H_r, D)", E::fp32, qh},
      {Buf::lse, "lse", "(B, H_r, C)", E::fp32, lse},
      {Buf::o_local, "o_local", "(B·c, Hq·D)", E::fp32, n * s.q},
      {Buf::mlp_norm, "mlp_norm", "(B·c, h)", E::fp32, n * s.h},
      {Buf::mlp_mean, "mlp_mean", "(B·c)", E::fp32, n},
      {Buf::mlp_rstd, "mlp_rstd", "(B·c)", E::fp32, n},
      {Buf::gate, "gate", "(B·c, f)", E::fp32, n * s.f},
      {Buf::up, "up", "(B·c, f)", E::fp32, n * s.f},
      {Buf::act, "act", "(B·c, f)", E::fp32, n * s.f},
      {Buf::pack, "pack", "(c, max(Hq, ΣK), D)", E::fp32, s.c * std::max(s.q, s.kv_send_heads * s.D)},
      {Buf::exchange_rows, "exchange_rows", "(ΣK·c) kv slot rows", E::int32, s.P > 1 ? s.kv_send_heads * s.c : 0},
      {Buf::logits, "logits", "(n, V) n = head rows", E::fp32, head * s.V},
      {Buf::losses, "losses", "(n)", E::fp32, head},
      {Buf::logits_lse, "logits_lse", "(n)", E::fp32, head},
      {Buf::loss_sums, "loss_sums", "(2) the pass's Σ losses, Σ counted rows", E::fp64, 2},
      {Buf::d_res, "d_res", "(B·c, h)", E::fp32, back * (n * s.h)},
      {Buf::d_attn, "d_attn", "(B·c, Hq·D)", E::fp32, back * (n * s.q)},
      {Buf::d_o_head, "d_o_head", "(B, C, H_r, D)", E::fp32, back * qh},
      {Buf::delta, "delta", "(B, H_r, C)", E::fp32, back * lse},
      {Buf::d_k, "d_k", "(B, C, K_r, D)", E::fp32, back * kvh},
      {Buf::d_v, "d_v", "(B, C, K_r, D)", E::fp32, back * kvh},
      {Buf::dq_first, "dq_first", "(B, C, H_r, D)", E::fp32, back * qh},
      {Buf::dq_local, "dq_local", "(B·c, Hq·D)", E::fp32, back * (n * s.q)},
      {Buf::dk_local, "dk_local", "(B·c, Hkv·D)", E::fp32, back * (n * s.kv)},
      {Buf::dv_local, "dv_local", "(B·c, Hkv·D)", E::fp32, back * (n * s.kv)},
      {Buf::d_norm, "d_norm", "(B·c, h)", E::fp32, back * (n * s.h)},
      {Buf::d_act, "d_act", "(B·c, f)", E::fp32, back * (n * s.f)},
      {Buf::d_gate, "d_gate", "(B·c, f)", E::fp32, back * (n * s.f)},
      {Buf::d_up, "d_up", "(B·c, f)", E::fp32, back * (n * s.f)},
      // bf16 staging: each its buffer's elements, in a bf16 store only
      {Buf::x_bf16, "x_bf16", "(B·c, h)", E::activation, packed * n * s.h},
      {Buf::x_out_bf16, "x_out_bf16", "(B·c, h)", E::activation, packed * n * s.h},
      {Buf::x_mid_bf16, "x_mid_bf16", "(B·c, h)", E::activation, packed * back * n * s.h},
      {Buf::q_head_bf16, "q_head_bf16", "(B, C, H_r, D)", E::activation, packed * back * qh},
      {Buf::k_head_bf16, "k_head_bf16", "(B, C, K_r, D)", E::activation, packed * kvh},
      {Buf::v_head_bf16, "v_head_bf16", "(B, C, K_r, D)", E::activation, packed * kvh},
      {Buf::k_stage0_bf16, "k_stage0_bf16", "(B, C, K_r, D)", E::activation, packed * kvh},
      {Buf::k_stage1_bf16, "k_stage1_bf16", "(B, C, K_r, D)", E::activation, packed * kvh},
      {Buf::v_stage0_bf16, "v_stage0_bf16", "(B, C, K_r, D)", E::activation, packed * kvh},
      {Buf::v_stage1_bf16, "v_stage1_bf16", "(B, C, K_r, D)", E::activation, packed * kvh},
      {Buf::o_head_bf16, "o_head_bf16", "(B, C, H_r, D)", E::activation, packed * back * qh},
      {Buf::o_local_bf16, "o_local_bf16", "(B·c, Hq·D)", E::activation, packed * back * (n * s.q)},
      {Buf::gate_bf16, "gate_bf16", "(B·c, f)", E::activation, packed * mlp * (n * s.f)},
      {Buf::up_bf16, "up_bf16", "(B·c, f)", E::activation, packed * mlp * (n * s.f)},
      {Buf::act_bf16, "act_bf16", "(B·c, f)", E::activation, packed * mlp * (n * s.f)},
      {Buf::q_stage0_bf16, "q_stage0_bf16", "(B, C, H_r, D)", E::activation, packed * back * qh},
      {Buf::q_stage1_bf16, "q_stage1_bf16", "(B, C, H_r, D)", E::activation, packed * back * qh},
      {Buf::d_o_head_bf16, "d_o_head_bf16", "(B, C, H_r, D)", E::activation, packed * back * qh},
      {Buf::do_stage0_bf16, "do_stage0_bf16", "(B, C, H_r, D)", E::activation, packed * back * qh},
      {Buf::do_stage1_bf16, "do_stage1_bf16", "(B, C, H_r, D)", E::activation, packed * back * qh},
      {Buf::d_res_bf16, "d_res_bf16", "(B·c, h)", E::activation, packed * back * (n * s.h)},
  };
  // The double buffer's two stages, shaped as what they stage (double_buffer.h); then the table in Buf order.
  for (const BufferSpec& row : stage_buffers(table, s)) table.push_back(row);
  std::sort(table.begin(), table.end(), [](const BufferSpec& a, const BufferSpec& b) { return a.id < b.id; });
  FPDT_ASSERT(static_cast<int>(table.size()) == kBufCount);
  for (int i = 0; i < kBufCount; ++i) FPDT_ASSERT(static_cast<int>(table[i].id) == i);
  return table;
}

const char* buffer_name(Buf buffer) {
  static const std::vector<BufferSpec> names = chunk_buffers(LayoutShape{});
  return buffer == Buf::none ? "-" : names.at(static_cast<size_t>(buffer)).name;
}

Buf packed_twin(Buf buffer) {
  switch (buffer) {
    case Buf::x: return Buf::x_bf16;
    case Buf::x_out: return Buf::x_out_bf16;
    case Buf::x_mid: return Buf::x_mid_bf16;
    case Buf::q_head: return Buf::q_head_bf16;
    case Buf::k_head: return Buf::k_head_bf16;
    case Buf::v_head: return Buf::v_head_bf16;
    case Buf::k_stage0: return Buf::k_stage0_bf16;
    case Buf::k_stage1: return Buf::k_stage1_bf16;
    case Buf::v_stage0: return Buf::v_stage0_bf16;
    case Buf::v_stage1: return Buf::v_stage1_bf16;
    case Buf::o_head: return Buf::o_head_bf16;
    case Buf::o_local: return Buf::o_local_bf16;
    case Buf::gate: return Buf::gate_bf16;
    case Buf::up: return Buf::up_bf16;
    case Buf::act: return Buf::act_bf16;
    case Buf::q_stage0: return Buf::q_stage0_bf16;
    case Buf::q_stage1: return Buf::q_stage1_bf16;
    case Buf::d_o_head: return Buf::d_o_head_bf16;
    case Buf::do_stage0: return Buf::do_stage0_bf16;
    case Buf::do_stage1: return Buf::do_stage1_bf16;
    case Buf::d_res: return Buf::d_res_bf16;
    default: return Buf::none;
  }
}

std::vector<ArraySpec> store_arrays(const LayoutShape& s) {
  const int64_t n = s.rows(), qh = n * s.q_heads_width(), kvh = n * s.kv_heads_width(), lse = n * s.local_q_heads * s.P;
  // Forward only: the inputs of the running layer and the next, its k and v, nothing else.
  const int64_t stored = s.backward ? s.stored_layers : 0, inputs_kept = s.backward ? s.L + 1 : 2;
  const int64_t kv_kept = s.cache_chunks > 0 ? s.L : s.backward ? s.stored_layers : 1, grad_kept = s.backward ? 1 : 0;
  const int64_t mlp = s.mlp_kept ? stored : 0;
  using E = Element;
  const StoreGroup inputs = StoreGroup::inputs, kept = StoreGroup::activations, grads = StoreGroup::gradients;
  std::vector<ArraySpec> table = {
      {Array::x, "x", "(B·c, h)", inputs, E::activation, inputs_kept, n * s.h},
      {Array::x_mid, "x_mid", "(B·c, h)", kept, E::activation, stored, n * s.h},
      {Array::q, "q", "(B, C, H_r, D)", kept, E::activation, stored, qh},
      {Array::k, "k", "(B, C, K_r, D)", kept, E::activation, kv_kept, kvh},
      {Array::v, "v", "(B, C, K_r, D)", kept, E::activation, kv_kept, kvh},
      {Array::o, "o", "(B, C, H_r, D)", kept, E::activation, stored, qh},
      // Its slot is at least o's: d_q (fp32, as many elements as o) lives in the pair's slots, and the largest
      // rank of an uneven split has more head-sharded elements (P·H_r·D per token) than Hq·D.
      {Array::o_local, "o_local", "(B·c, Hq·D)", kept, E::activation, stored, n * std::max(s.q, s.q_heads_width())},
      {Array::lse, "lse", "(B, H_r, C)", kept, E::fp32, stored, lse},
      {Array::gate, "gate", "(B·c, f)", kept, E::activation, mlp, n * s.f},
      {Array::up, "up", "(B·c, f)", kept, E::activation, mlp, n * s.f},
      {Array::act, "act", "(B·c, f)", kept, E::activation, mlp, n * s.f},
      {Array::d_res, "d_res", "(B·c, h)", grads, E::activation, grad_kept, n * s.h},
      {Array::d_o, "d_o", "(B, C, H_r, D)", grads, E::activation, grad_kept, qh},
      {Array::delta, "delta", "(B, H_r, C)", grads, E::fp32, grad_kept, lse},
      // In the slots of o and o_local of its layer (ArraySpec::in_slots_of): as many layers as they keep.
      {Array::d_q, "d_q", "(B, C, H_r, D)", grads, E::fp32, stored, qh, Array::o},
  };
  FPDT_ASSERT(static_cast<int>(table.size()) == kArrayCount);
  for (int i = 0; i < kArrayCount; ++i) FPDT_ASSERT(static_cast<int>(table[i].id) == i);
  for (ArraySpec& array : table)
    array.chunks = s.cache_chunks > 0 && (array.id == Array::k || array.id == Array::v) ? s.cache_chunks : s.u;
  for (const ArraySpec& array : table) {
    if (array.in_slots_of == Array::count) continue;
    const ArraySpec &first = table[static_cast<size_t>(array.in_slots_of)],
                    &second = table[static_cast<size_t>(array.in_slots_of) + 1];
    FPDT_ASSERT(first.layers == array.layers && second.layers == array.layers);
    FPDT_ASSERT(first.slot_bytes(s) + second.slot_bytes(s) >= array.slot_bytes(s));  // 4 ≤ 2a for a ≥ 2
  }
  return table;
}

const char* array_name(Array array) {
  static const std::vector<ArraySpec> names = store_arrays(LayoutShape{});
  return names.at(static_cast<size_t>(array)).name;
}

bool stored_as_activation(Array array) {
  static const std::vector<ArraySpec> specs = store_arrays(LayoutShape{});
  return specs.at(static_cast<size_t>(array)).element == Element::activation;
}

bool layout_fits_64_bits(const LayoutShape& s) {
  // Every element count of the table is at most B·C = P·B·c token rows times the widest row (the head
  // rows' logits are bounded by kHeadLogitsBytes), each element at most 8 bytes; 2x more leaves the
  // transfer-block rounding room.
  int64_t rows = 0, bytes = 0;
  const int64_t widest = std::max({s.h, s.f, s.q, s.kv, s.kv_heads_width(), s.P, int64_t{1}});
  if (s.B < 0 || s.c < 0 || s.u < 0 || s.cache_chunks < 0 || !checked_mul(rows, s.B, s.c) || !checked_mul(rows, rows, s.P) ||
      !checked_mul(bytes, rows, widest) || !checked_mul(bytes, bytes, int64_t{16}))
    return false;
  int64_t total = 0;
  for (const BufferSpec& buffer : chunk_buffers(s))
    if (!checked_add(total, total, buffer.bytes(s))) return false;
  for (const ArraySpec& array : store_arrays(s)) {
    int64_t slots = 0, array_bytes = 0;
    if (!checked_mul(slots, array.layers, array.chunks) || !checked_mul(array_bytes, array.slot_bytes(s), slots) ||
        !checked_add(total, total, array_bytes))
      return false;
  }
  return true;
}

size_t chunk_arena_bytes(const LayoutShape& shape) {
  size_t total = 0;
  for (const BufferSpec& buffer : chunk_buffers(shape)) total += static_cast<size_t>(buffer.bytes(shape));
  return total;
}

size_t store_bytes(const LayoutShape& shape, std::optional<StoreGroup> group) {
  size_t total = 0;
  for (const ArraySpec& array : store_arrays(shape))
    if ((!group || array.group == *group) && array.in_slots_of == Array::count)
      total += static_cast<size_t>(array.slot_bytes(shape)) * static_cast<size_t>(array.layers * array.chunks);
  return total;
}

// ---- model states ---------------------------------------------------------------------------------

int64_t shard_floats(int64_t unit_floats, int64_t ranks) {
  const int64_t block = kShardBlockFloats * ranks;
  return (unit_floats + block - 1) / block * kShardBlockFloats;
}

ShardRange shard_range(int64_t unit_floats, int64_t ranks, int64_t rank) {
  const int64_t s = shard_floats(unit_floats, ranks);
  return ShardRange{std::min(rank * s, unit_floats), std::min((rank + 1) * s, unit_floats)};
}

int64_t StateSpec::bytes() const {
  return static_cast<int64_t>(kernels::transfer_bytes(static_cast<size_t>(elements * element_bytes)));
}

ZeroPlan zero_plan(const model::ParameterLayout& layout, const StateShape& shape) {
  std::vector<int64_t> units;
  for (const model::ParameterUnit& unit : layout.units()) units.push_back(unit.numel());
  return make_zero_plan(units, !layout.contains("lm_head.weight"), shape.run.zero,
                        shape.run.recompute, kWeightBytes);
}

std::vector<StateSpec> model_state_buffers(const model::ParameterLayout& layout, const StateShape& s) {
  int64_t shards = 0;
  for (const model::ParameterUnit& unit : layout.units()) shards += shard_floats(unit.numel(), s.W);
  const int64_t whole = layout.total_numel();
  const int stage = s.run.zero;
  const bool master = s.run.offload_optimizer;  // the weights are the masters unless the update runs offloaded
  const Tier optimizer_tier = s.run.offload_optimizer ? Tier::offload : Tier::compute;
  auto part = [&](bool sharded, const char* what) {
    return std::string(what) + (sharded ? " (shards)" : "");
  };
  std::vector<StateSpec> table = {
      {StateBuf::weights, 0, part(stage >= 3, "weights"), Tier::compute, stage >= 3 ? shards : whole,
       kWeightBytes}};
  const bool bf16 = s.run.precision == kernels::Precision::bf16;
  const StateSpec working_copy{StateBuf::weights_bf16, 0, part(stage >= 3, "weights, bf16 working copy"),
                               Tier::compute, stage >= 3 ? shards : whole, 2};
  if (s.run.forward_only) {  // the weights alone, and a bf16 run's working copy, which its GEMMs read
    FPDT_ASSERT(stage == 0 && !master);
    if (bf16) table.push_back(working_copy);
    return table;
  }
  table.push_back({StateBuf::gradients, 0, part(stage >= 2, "gradients"),
                   stage >= 2 ? optimizer_tier : Tier::compute, stage >= 2 ? shards : whole, 4});
  if (master)
    table.push_back({StateBuf::master, 0, part(stage >= 1, "master weights"), optimizer_tier,
                     stage >= 1 ? shards : whole, 4});
  table.push_back({StateBuf::m, 0, part(stage >= 1, "AdamW m"), optimizer_tier, stage >= 1 ? shards : whole, 4});
  table.push_back({StateBuf::v, 0, part(stage >= 1, "AdamW v"), optimizer_tier, stage >= 1 ? shards : whole, 4});
  const ZeroPlan plan = zero_plan(layout, s);
  for (size_t k = 0; k < plan.slots.size(); ++k)
    table.push_back({StateBuf::slot, static_cast<int>(k), "ZeRO slot " + std::to_string(k), Tier::compute,
                     plan.slots[k].bytes, 1});
  if (!bf16) return table;
  table.push_back(working_copy);
  if (stage < 3) return table;
  for (size_t k = 0; k < plan.slots.size(); ++k)  // a unit's words: half its fp32 bytes
    table.push_back({StateBuf::slot_bf16, static_cast<int>(k), "ZeRO slot " + std::to_string(k) + " (bf16 words)",
                     Tier::compute, plan.slots[k].bytes / 2, 1});
  table.push_back({StateBuf::vector_staging, 0, "ZeRO vectors in transit (fp32)", Tier::compute,
                   2 * largest_unit_vectors(layout), 4});
  return table;
}

std::vector<ShardRange> unit_vectors(const model::ParameterLayout& layout, int unit) {
  std::vector<ShardRange> vectors;
  if (!gathers_bf16_words(unit)) return vectors;
  const model::ParameterUnit& u = layout.units()[static_cast<size_t>(unit)];
  for (const model::ParameterInfo& info : layout.tensors())
    if (!info.is_matrix() && info.offset >= u.begin && info.offset < u.end)
      vectors.push_back({info.offset - u.begin, info.offset - u.begin + info.numel()});
  return vectors;
}

bool gathers_bf16_words(int unit) { return unit != model::ParameterLayout::kEmbeddingUnit; }

int64_t largest_unit_vectors(const model::ParameterLayout& layout) {
  int64_t largest = 0;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    int64_t floats = 0;
    for (const ShardRange& vector : unit_vectors(layout, static_cast<int>(u))) floats += vector.size();
    largest = std::max(largest, floats);
  }
  return largest;
}

}  // namespace fpdt::pipeline

// Generation through the FPDT pipeline (fpdt_model.h, "generation"): the prompt's forward keeps every
// layer's k and v in the store — the KV cache, in whatever tier the run offloads to — and each decoded
// token's query streams the cached chunks through the double buffer, its own k and v appended to the last
// one. Prefill is the pipeline's forward (no second model); decoding is the same layer maths on one row.
#include <algorithm>
#include <array>
#include <climits>
#include <utility>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"
#include "fpdt/base/machine.h"
#include "fpdt/base/trace.h"
#include "fpdt/pipeline/double_buffer.h"
#include "fpdt/pipeline/fpdt_model.h"

namespace fpdt::pipeline {

namespace {
constexpr const char* kModule = "generation";
}  // namespace

// The prompt's forward runs over whole chunks: a prompt shorter than the run's chunk C is padded into one
// chunk as long as the generation can use (so the cache's chunks are not cut to the prompt's length), a
// longer one to its u chunks' u·C tokens, which the forward computes anyway. The padding's k and v are
// overwritten by the decoded tokens before they are read. The cache has u + ⌈new/C⌉ chunks, room for S +
// max_new_tokens positions. So prompts of the same chunk count share one layout: the arena and the store
// are laid out once for them (RULER's prompts of a length), not once per prompt.
GenerationLayout plan_generation(const model::ModelConfig& config, const RunSpec& run, int sp_ranks, int sp_rank,
                                 int64_t prompt_tokens, int64_t max_new_tokens, bool dry) {
  int64_t positions = 0;
  if (prompt_tokens <= 0 || max_new_tokens < 0 || !checked_add(positions, prompt_tokens, max_new_tokens))
    throw Error(kModule, "a prompt of " + std::to_string(prompt_tokens) + " tokens and " +
                             std::to_string(max_new_tokens) + " new tokens cannot be cached", "ask for fewer tokens");
  if (config.learned_positions() && positions > config.max_positions)
    throw Error(kModule,
                "a prompt of " + std::to_string(prompt_tokens) + " tokens and " + std::to_string(max_new_tokens) +
                    " new tokens exceed the " + std::to_string(config.max_positions) + " learned positions of model '" +
                    config.name + "'",
                "shorten the prompt or ask for fewer tokens");
  int64_t forward_tokens =
      run.chunk_tokens > 0 ? std::max(prompt_tokens, std::min(run.chunk_tokens, positions)) : prompt_tokens;
  ChunkPlan plan = plan_chunks(run, forward_tokens, sp_ranks, sp_rank);
  if (!config.learned_positions() || plan.padded_tokens <= config.max_positions) {
    forward_tokens = plan.padded_tokens;
    plan = plan_chunks(run, forward_tokens, sp_ranks, sp_rank);
  }
  const int64_t cache_chunks = plan.chunks + (max_new_tokens + plan.chunk_tokens - 1) / plan.chunk_tokens;
  const LayoutShape shape = run_layout_shape(
      config, run, make_head_sharding(config.heads, config.kv_heads, sp_ranks, sp_rank), plan, 1, cache_chunks);
  const std::string what = "the KV cache of a prompt of " + std::to_string(prompt_tokens) + " tokens and " +
                           std::to_string(max_new_tokens) + " new ones";
  if (!layout_fits_64_bits(shape))
    throw Error(kModule, what + " needs more bytes than 64-bit sizes count", "ask for fewer tokens");
  // A store in RAM (or resident in a host compute tier) beyond the machine's memory would only fail later,
  // page by page: refused now (a dry run still reports it).
  const size_t memory = machine_memory_bytes(), bytes = store_bytes(shape);
  if (!dry && run.offload.kind != OffloadKind::disk && memory > 0 && bytes > memory)
    throw Error(kModule,
                what + " needs " + format_bytes(static_cast<double>(bytes)) + " in the store (" +
                    spelling(run.offload) + "), more than this machine's " + format_bytes(static_cast<double>(memory)),
                "ask for fewer tokens, or keep the cache on disk (--offload disk)");
  return {forward_tokens, cache_chunks};
}

int64_t FpdtModel::reserve_generation(int64_t prompt_tokens, int64_t max_new_tokens, bool dry) {
  const GenerationLayout generation =
      plan_generation(config_, run_, sp_.size(), sp_.rank(), prompt_tokens, max_new_tokens, dry);
  reserve(generation.forward_tokens, 1, dry, generation.cache_chunks);
  return generation.forward_tokens;
}

int64_t FpdtModel::cache_capacity() const { return cache_chunks_ * plan_.chunk_tokens; }

void FpdtModel::dry_run_generation(int64_t prompt_tokens, int64_t max_new_tokens) {
  reserve_generation(prompt_tokens, max_new_tokens, true);
}

const float* FpdtModel::fetch_now(Array array, int layer, int chunk, Buf buffer, int64_t elements) {
  const bool packed = bf16_store() && stored_as_activation(array);
  const Buf landing = packed ? packed_twin(buffer) : buffer;
  const void* slot = store_->resident(array, layer, chunk);
  if (slot == nullptr) {
    const size_t bytes = store_->slot_bytes(array);
    copies_->wait(copies_->read(own_[static_cast<size_t>(landing)], store_->storage(), store_->offset(array, layer, chunk),
                                bytes));
    traffic_.read_bytes += bytes;
    slot = own_[static_cast<size_t>(landing)];
  }
  if (!packed) return static_cast<const float*>(slot);
  backend_.unpack_bf16(own<float>(buffer), static_cast<const uint16_t*>(slot), elements);
  return own<float>(buffer);
}

void FpdtModel::last_logits(const float* x) {
  const model::AttentionInput norm{own<float>(Buf::norm), own<float>(Buf::norm_mean), own<float>(Buf::norm_rstd)};
  const model::HeadScratch scratch{head_rows_, own<float>(Buf::logits), own<float>(Buf::losses),
                                   own<float>(Buf::logits_lse), nullptr};
  math_.head_forward(head_weights(), x, 1, model::Targets{}, norm, scratch, std::nullopt,
                     model::HeadOutputs{.logits = own<float>(Buf::logits)});
}

void FpdtModel::prefill(const std::vector<int32_t>& prompt, int64_t max_new_tokens, float* logits) {
  FPDT_CHECK(run_.forward_only, kModule, "generation needs a model laid out for forward passes only",
             "build it with RunSpec::forward_only = true");
  FPDT_CHECK(!prompt.empty(), kModule, "the prompt is empty", "give at least one token of prompt");
  const int64_t S = static_cast<int64_t>(prompt.size());
  model::check_batch(config_, model::Batch{1, S, prompt.data(), nullptr, nullptr});
  const int64_t forward_tokens = reserve_generation(S, max_new_tokens, false);
  padded_prompt_.assign(prompt.begin(), prompt.end());
  padded_prompt_.resize(static_cast<size_t>(forward_tokens), 0);
  execute_pass(model::Batch{1, forward_tokens, padded_prompt_.data(), nullptr, nullptr}, Pass::forward, 0.0,
               TokenOutputs{});  // its schedule runs no LM head (kv_cache)
  cached_tokens_ = S;
  // The last position's final hidden state is on the rank whose local chunk holds it (chunk_plan.h).
  const int64_t last = S - 1, c = plan_.local_chunk_tokens;
  const int owner = static_cast<int>((last / c) % plan_.ranks);
  const int chunk = static_cast<int>(last / plan_.chunk_tokens);
  if (sp_.rank() == owner) {
    const int64_t row = last - plan_.local_chunk_begin(chunk);
    const float* x = fetch_now(Array::x, config_.layers, chunk, Buf::x, (row + 1) * config_.hidden);
    last_logits(x + row * config_.hidden);
  }
  const size_t logits_bytes = sizeof(float) * static_cast<size_t>(config_.vocab_size);
  if (plan_.ranks > 1) sp_.broadcast(own<float>(Buf::logits), logits_bytes, owner);
  memory_.download(logits, own<float>(Buf::logits), logits_bytes);
}

void FpdtModel::decode(int32_t token, float* logits) {
  FPDT_CHECK(cached_tokens_ > 0 && arena_, kModule, "decode before prefill", "prefill the prompt first");
  const int64_t p = cached_tokens_;
  if (p >= cache_capacity())
    throw Error(kModule, "the KV cache holds " + std::to_string(cache_capacity()) + " positions, all taken",
                "prefill with a larger max_new_tokens");
  FPDT_CHECK(token >= 0 && token < config_.vocab_size, kModule,
             "token " + std::to_string(token) + " is outside the vocabulary of " + std::to_string(config_.vocab_size), "");
  const trace::Span span("decode", "compute");
  traffic_ = OffloadTraffic{};
  // The token's inputs: one row.
  const int64_t max_id = config_.learned_positions() ? config_.max_positions - 1 : INT32_MAX;
  host_tokens_[0] = token;
  host_positions_[0] = p;
  host_position_ids_[0] = static_cast<int32_t>(std::min(p, max_id));
  memory_.upload(own<int32_t>(Buf::tokens), host_tokens_.data(), sizeof(int32_t));
  memory_.upload(own<int64_t>(Buf::positions), host_positions_.data(), sizeof(int64_t));
  memory_.upload(own<int32_t>(Buf::position_ids), host_position_ids_.data(), sizeof(int32_t));

  float* x = own<float>(Buf::x);
  float* x_out = own<float>(Buf::x_out);
  float* const x_mid = own<float>(Buf::x_mid);
  math_.embedding_forward(embedding_weights(), own<int32_t>(Buf::tokens), own<int32_t>(Buf::position_ids), x, 1);
  const model::AttentionInput norm{own<float>(Buf::norm), own<float>(Buf::norm_mean), own<float>(Buf::norm_rstd)};
  const model::MlpActivations mlp{own<float>(Buf::mlp_norm), own<float>(Buf::mlp_mean), own<float>(Buf::mlp_rstd),
                                  own<float>(Buf::gate), own<float>(Buf::up), own<float>(Buf::act)};
  const int64_t D = config_.head_dim, local_q = sharding_.local_q_heads;
  const int rank = sp_.rank();
  // This rank's kv slots of the token's k and v, (K_r, D) each: slot s holds kv head kv_head_of_slot(rank, s).
  float* const k_slots = own<float>(Buf::k_head);
  float* const v_slots = own<float>(Buf::v_head);
  // This rank's heads' output, gathered from every rank into the token's whole attention output.
  float* const o = sharding_.ranks > 1 ? own<float>(Buf::o_head) : own<float>(Buf::o_local);
  for (int layer = 0; layer < config_.layers; ++layer) {
    const model::LayerTensors w = layer_weights(layer);
    float* const q = own<float>(Buf::q_local);
    float* const k = own<float>(Buf::k_local);
    float* const v = own<float>(Buf::v_local);
    math_.attention_input_forward(w, x, own<int64_t>(Buf::positions), 1, norm, q, k, v);
    for (int slot = 0; slot < sharding_.local_kv_heads; ++slot) {
      const int64_t head = sharding_.kv_head_of_slot(rank, slot);
      memory_.copy(k_slots + slot * D, k + head * D, sizeof(float) * static_cast<size_t>(D));
      memory_.copy(v_slots + slot * D, v + head * D, sizeof(float) * static_cast<size_t>(D));
    }
    attend_cache(layer, p, q + sharding_.q_head_begin(rank) * D, k_slots, v_slots, o, own<float>(Buf::lse));
    math_.round_kept(o, local_q * D);
    if (sharding_.ranks > 1) sp_.all_gather_v(o, own<float>(Buf::o_local), head_output_bytes_.data());
    math_.attention_output_forward(w, own<float>(Buf::o_local), x, x_mid, 1);
    math_.mlp_forward(w, x_mid, x_out, 1, mlp);
    std::swap(x, x_out);
  }
  copies_->wait_all();  // the appended rows' writes, before the next token fetches them
  last_logits(x);
  memory_.download(logits, own<float>(Buf::logits), sizeof(float) * static_cast<size_t>(config_.vocab_size));
  ++cached_tokens_;
}

// kv chunk j of the cache holds positions [j·C, (j + 1)·C), the prompt's (written by the prefill's forward)
// and those decoded since (appended here, one row a token). Position p reads chunks first..p/C (first: the
// earliest its sliding window reaches), the n-th in stage n mod 2 while the next one is fetched into the
// other; only the rows up to p move. Its own row goes into the last chunk before it is read: in place in a
// resident store, else into the fetched copy, whose transfer blocks around the row are written back.
void FpdtModel::attend_cache(int layer, int64_t position, const float* q, const float* k, const float* v, float* o,
                             float* lse) {
  const int64_t C = plan_.chunk_tokens, D = config_.head_dim;
  const int64_t width = sharding_.local_kv_heads * D;  // floats of one cached row (this rank's kv heads)
  const int64_t window = config_.window(layer);
  const bool packed = bf16_store();  // the cache holds bf16 words (k and v are activations)
  const size_t element = packed ? sizeof(uint16_t) : sizeof(float);
  const int64_t last = position / C, row = position - last * C;
  const int64_t first = window > 0 ? std::max<int64_t>(0, position - window + 1) / C : 0;
  auto rows_of = [&](int64_t chunk) { return std::min(C, position + 1 - chunk * C); };
  // Where chunk j lands in `stage`: its slot itself (resident), else the stage's buffer (its bf16 twin).
  auto landing = [&](Array array, Buf buffer, int64_t chunk) -> void* {
    void* slot = store_->resident(array, layer, static_cast<int>(chunk));
    if (slot != nullptr) return slot;
    return own_[static_cast<size_t>(packed ? packed_twin(buffer) : buffer)];
  };
  std::array<kernels::CopyEvent, 2> fetched{};
  auto fetch = [&](int64_t chunk, const Stage& stage, size_t n) {
    if (store_->resident()) return;
    const size_t bytes = kernels::transfer_bytes(static_cast<size_t>(rows_of(chunk) * width) * element);
    for (const auto& [array, buffer] : {std::pair{Array::k, stage.k}, std::pair{Array::v, stage.v}}) {
      fetched[n % 2] = copies_->read(landing(array, buffer, chunk), store_->storage(),
                                     store_->offset(array, layer, static_cast<int>(chunk)), bytes);
      traffic_.read_bytes += bytes;
    }
  };
  fetch(first, stage_of(0), 0);
  for (int64_t chunk = first, n = 0; chunk <= last; ++chunk, ++n) {
    const Stage& stage = stage_of(static_cast<size_t>(n));
    if (chunk < last) fetch(chunk + 1, stage_of(static_cast<size_t>(n + 1)), static_cast<size_t>(n + 1));
    copies_->wait(fetched[static_cast<size_t>(n) % 2]);
    const int64_t rows = rows_of(chunk);
    std::array<const void*, 2> kv{};  // floats, or a bf16 store's words (the kernel reads them as they are)
    for (int side = 0; side < 2; ++side) {
      const Array array = side == 0 ? Array::k : Array::v;
      const Buf buffer = side == 0 ? stage.k : stage.v;
      void* cached = landing(array, buffer, chunk);
      if (chunk == last) {  // the position's own row
        const float* own_row = side == 0 ? k : v;
        if (packed)
          backend_.pack_bf16(static_cast<uint16_t*>(cached) + row * width, own_row, width);
        else
          memory_.copy(static_cast<float*>(cached) + row * width, own_row, sizeof(float) * static_cast<size_t>(width));
        if (!store_->resident()) {
          const size_t begin = static_cast<size_t>(row * width) * element / kernels::kTransferAlignBytes *
                               kernels::kTransferAlignBytes;
          const size_t end = kernels::transfer_bytes(static_cast<size_t>((row + 1) * width) * element);
          copies_->write(store_->storage(), store_->offset(array, layer, static_cast<int>(chunk)) + begin,
                         static_cast<char*>(cached) + begin, end - begin);
          traffic_.written_bytes += end - begin;
        }
      }
      kv[static_cast<size_t>(side)] = cached;
    }
    kernels::AttentionChunkParams block;
    block.q = q;
    if (packed) {
      block.k_words = static_cast<const uint16_t*>(kv[0]);
      block.v_words = static_cast<const uint16_t*>(kv[1]);
    } else {
      block.k = static_cast<const float*>(kv[0]);
      block.v = static_cast<const float*>(kv[1]);
    }
    block.B = 1;
    block.Cq = 1;
    block.Ck = rows;
    block.H = sharding_.local_q_heads;
    block.Hkv = sharding_.local_kv_heads;
    block.D = config_.head_dim;
    block.q_begin = position;
    block.kv_begin = chunk * C;
    block.scale = config_.attention_scale(layer);
    block.window = window;
    block.precision = run_.precision;
    backend_.attention_chunk_forward(o, lse, block, n > 0);
  }
}

}  // namespace fpdt::pipeline

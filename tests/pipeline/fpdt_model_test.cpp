// FPDT invariances: the chunked, offloaded, sequence-parallel pipeline computes the same loss and
// gradients as the unchunked single-rank model (within fp32 rounding of a different summation
// order), and offload on/off and recompute none/layer give bitwise the same results.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <optional>

#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/ops.h"
#include "fpdt/model/transformer.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/pipeline/model_states.h"
#include "fpdt/tensor/memory.h"
#include "pipeline/pipeline_testing.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

struct Data {
  std::vector<int32_t> tokens, targets;
  model::Batch batch;
  Data(Rng& rng, int B, int64_t S, int V) {
    for (int64_t n = 0; n < B * S; ++n) {
      tokens.push_back(static_cast<int32_t>(rng.below(V)));
      targets.push_back(rng.uniform() < 0.1 ? kernels::kIgnoreIndex : static_cast<int32_t>(rng.below(V)));
    }
    batch = model::Batch{B, S, tokens.data(), targets.data(), nullptr};
  }
};

// The same with the gradient of the batch's mean loss.
Result run_pipeline(const model::ModelConfig& config, const RunSpec& pipeline, int ranks, const Data& data,
                    uint64_t seed) {
  const double count = model::counted_targets(data.batch.targets, nullptr, data.batch.B * data.batch.T);
  return run_pipeline(config, pipeline, ranks, data.batch, 1.0 / count, seed);
}

Result run_unchunked(const model::ModelConfig& config, const Data& data, uint64_t seed,
                     kernels::Precision precision = kernels::Precision::fp32) {
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  model::Transformer model(config, *backend, seed, precision);
  const model::LossStats stats = model.forward_backward(data.batch);
  return Result{stats.loss_sum, stats.count,
                std::vector<float>(model.grads().data(), model.grads().data() + model.grads().numel()), {}};
}

// Offloaded to RAM or disk and recomputing the layer, the pipeline (resident: `resident` is its result)
// gives bitwise the same loss and gradients.
void expect_offload_and_recompute_bitwise(const model::ModelConfig& config, const RunSpec& pipeline, int ranks,
                                          const Data& data, uint64_t seed, const Result& resident) {
  for (const char* offload : {"ram", "disk:/tmp"}) {
    RunSpec other = pipeline;
    other.offload = parse_offload(offload);
    const Result offloaded = run_pipeline(config, other, ranks, data, seed);
    EXPECT_EQ(offloaded.loss_sum, resident.loss_sum) << offload;
    EXPECT_EQ(0, std::memcmp(offloaded.grads.data(), resident.grads.data(), resident.grads.size() * sizeof(float)))
        << offload;
  }
  RunSpec recompute = pipeline;
  recompute.recompute = Recompute::layer;
  const Result recomputed = run_pipeline(config, recompute, ranks, data, seed);
  EXPECT_EQ(recomputed.loss_sum, resident.loss_sum);
  EXPECT_EQ(0, std::memcmp(recomputed.grads.data(), resident.grads.data(), resident.grads.size() * sizeof(float)));
}

struct Case {
  const char* name;
  model::Family family;
  int heads, kv_heads, ranks, chunks, B;
  int64_t S;
};

class Invariance : public ::testing::TestWithParam<Case> {};

TEST_P(Invariance, ChunkedShardedOffloadedEqualsUnchunked) {
  const Case& c = GetParam();
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const model::ModelConfig config = tiny(c.family, c.heads, c.kv_heads);
  const Data data(rng, c.B, c.S, config.vocab_size);
  const Result want = run_unchunked(config, data, seed);

  RunSpec pipeline;
  pipeline.chunks = c.chunks;
  pipeline.offload.kind = OffloadKind::none;
  const Result got = run_pipeline(config, pipeline, c.ranks, data, seed);
  // Same maths, different summation order (chunked LSE merges, per-rank partial weight gradients
  // summed by the all-reduce): fp32 rounding only, bounded by what the model's sums are.
  const double loss_bound = testing::fp32_bound(testing::transformer_loss_reordering(config, c.B * c.S, c.S, want.count));
  const double grad_bound = testing::fp32_bound(testing::transformer_reordering(config, c.B * c.S, c.S, true));
  const double loss_error = std::abs(got.loss_sum / got.count - want.loss_sum / want.count) / (want.loss_sum / want.count);
  EXPECT_LE(loss_error, loss_bound);
  EXPECT_DOUBLE_EQ(got.count, want.count);
  const double grad_error = testing::relative_error(got.grads, want.grads);
  std::printf("[ error    ] loss %.2e (bound %.2e), gradients %.2e (bound %.2e)\n", loss_error, loss_bound, grad_error,
              grad_bound);
  EXPECT_LE(grad_error, grad_bound);

  expect_offload_and_recompute_bitwise(config, pipeline, c.ranks, data, seed, got);
}

// The same invariances in bf16 (model/layer.h's rounding points, the store in bf16): chunked and sharded
// equals the unchunked bf16 model within bf16's bound (the fp32 reorders move values across bf16 rounding
// boundaries: tests/tolerances.h bf16_bound), and bitwise on one chunk and one rank (the cpu backend runs
// whole-sequence attention as one block: then nothing is reordered, and any rounding point the pipeline
// and the Transformer did not share would show); offloaded to RAM or disk (the store's bf16 words) and
// recomputed (the rounded values again) bitwise the same as everything resident.
TEST_P(Invariance, Bf16ChunkedShardedOffloadedEqualsUnchunked) {
  const Case& c = GetParam();
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const model::ModelConfig config = tiny(c.family, c.heads, c.kv_heads);
  const Data data(rng, c.B, c.S, config.vocab_size);
  const Result want = run_unchunked(config, data, seed, kernels::Precision::bf16);

  RunSpec pipeline;
  pipeline.chunks = c.chunks;
  pipeline.offload.kind = OffloadKind::none;
  pipeline.precision = kernels::Precision::bf16;
  const Result got = run_pipeline(config, pipeline, c.ranks, data, seed);
  EXPECT_DOUBLE_EQ(got.count, want.count);
  if (c.ranks == 1 && c.chunks == 1) {  // the same kernels over the same rows, rounded at the same points
    EXPECT_EQ(got.loss_sum, want.loss_sum);
    EXPECT_EQ(0, std::memcmp(got.grads.data(), want.grads.data(), got.grads.size() * sizeof(float)));
  }
  const double loss_bound = testing::bf16_bound(testing::bf16_roundings(config, false), true, want.count);
  const double grad_bound = testing::bf16_bound(testing::bf16_roundings(config, true), true);
  const double want_mean = want.loss_sum / want.count;
  const double loss_error = std::abs(got.loss_sum / got.count - want_mean) / want_mean;
  const double grad_error = testing::relative_error(got.grads, want.grads);
  std::printf("[ error    ] bf16: loss %.2e (bound %.2e), gradients %.2e (bound %.2e)\n", loss_error, loss_bound,
              grad_error, grad_bound);
  EXPECT_LE(loss_error, loss_bound);
  EXPECT_LE(grad_error, grad_bound);

  expect_offload_and_recompute_bitwise(config, pipeline, c.ranks, data, seed, got);
}

INSTANTIATE_TEST_SUITE_P(
    Pipeline, Invariance,
    ::testing::Values(Case{"llama_mha_p1_u1", model::Family::llama, 4, 4, 1, 1, 1, 24},
                      Case{"gpt_p1_u1", model::Family::gpt, 4, 4, 1, 1, 2, 21},
                      Case{"llama_gqa_p1_u2", model::Family::llama, 4, 2, 1, 2, 2, 29},
                      Case{"llama_gqa_p1_u8", model::Family::llama, 4, 2, 1, 8, 1, 61},
                      Case{"llama_gqa_p2_u4", model::Family::llama, 4, 2, 2, 4, 2, 50},
                      Case{"llama_gqa_p4_u2_replicated", model::Family::llama, 4, 2, 4, 2, 1, 45},
                      Case{"llama_mha_p4_u4", model::Family::llama, 4, 4, 4, 4, 2, 64},
                      Case{"gpt_p2_u2", model::Family::gpt, 4, 4, 2, 2, 2, 37},
                      Case{"gpt_p1_u4", model::Family::gpt, 4, 4, 1, 4, 1, 30}),
    [](const auto& info) { return std::string(info.param.name); });

// Issue 16: with the store resident and the attention kept (offload none, recompute none), the forward
// keeps the MLP's gate, up and act for the backward (3·f more per token and layer in the store) instead
// of the backward recomputing them; the invariance test above holds it bitwise equal to the offloaded
// and recomputed runs, which recompute them.
TEST(Pipeline, KeepsTheMlpActivationsOnlyWhenResidentAndNotRecomputing) {
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  auto local = comm::make_local();
  const model::ModelConfig config = tiny(model::Family::llama, 4, 2);
  auto shape = [&](const char* offload, Recompute recompute) {
    RunSpec pipeline;
    pipeline.chunks = 2;
    pipeline.offload = parse_offload(offload);
    pipeline.recompute = recompute;
    const FpdtModel model(config, *backend, *local, pipeline);
    EXPECT_EQ(model.layout_shape(64, 4).mlp_kept, model.mlp_kept());
    return model.layout_shape(64, 4);
  };
  const LayoutShape kept = shape("none", Recompute::none);
  EXPECT_TRUE(kept.mlp_kept);
  EXPECT_FALSE(shape("ram", Recompute::none).mlp_kept);
  EXPECT_FALSE(shape("none", Recompute::layer).mlp_kept);
  LayoutShape recomputed = kept;
  recomputed.mlp_kept = false;
  // 2 chunks of 4 sequences × 32 tokens, 2 layers, gate, up and act of f = 48 floats: whole 4 KiB blocks.
  EXPECT_EQ(store_bytes(kept) - store_bytes(recomputed), size_t{3} * 2 * 2 * (4 * 32) * 48 * sizeof(float));
}

// A forward-only model (fpdt eval) holds its weights alone in the compute tier: no gradients, AdamW
// moments or ZeRO slots (it held all four arrays, 4× the weights, before). A training model holds weights,
// gradients and both moments.
TEST(Pipeline, AForwardOnlyModelHoldsItsWeightsAlone) {
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  auto local = comm::make_local();
  const model::ModelConfig config = tiny(model::Family::llama, 4, 2);
  const size_t weight_bytes = static_cast<size_t>(model::ParameterLayout(config).total_numel()) * sizeof(float);
  auto held = [&](bool forward_only) {
    RunSpec pipeline;
    pipeline.forward_only = forward_only;
    const size_t before = MemoryTiers::instance().usage(Tier::compute).active_bytes;
    FpdtModel model(config, *backend, *local, pipeline);
    EXPECT_EQ(model.states().bytes(Tier::compute), MemoryTiers::instance().usage(Tier::compute).active_bytes - before);
    if (forward_only) {
      EXPECT_THROW(model.states().gradients(), Error);
    }
    return model.states().bytes(Tier::compute);
  };
  const size_t weights_held = held(true);  // each buffer is a whole number of 4 KiB blocks
  EXPECT_GE(weights_held, weight_bytes);
  EXPECT_LT(weights_held, weight_bytes + 4096);
  EXPECT_EQ(held(false), 4 * weights_held);
}

// Issue 16: the B sequences of a micro-batch go through each chunk together (B·c rows per GEMM, the
// batch dimension in the attention blocks). The loss and gradients must equal those of the sequences
// run one at a time, summed, with the same gradient scale.
TEST(Pipeline, BatchedChunksEqualSequencesOneByOne) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const model::ModelConfig config = tiny(model::Family::llama, 4, 2);
  const int B = 3, ranks = 2;
  const int64_t S = 37;
  const Data data(rng, B, S, config.vocab_size);
  const double scale = 1.0 / model::counted_targets(data.batch.targets, nullptr, B * S);
  RunSpec pipeline;
  pipeline.chunks = 3;
  pipeline.offload = parse_offload("ram");
  const Result batched = run_pipeline(config, pipeline, ranks, data.batch, scale, seed);

  Result sequential;
  sequential.grads.assign(batched.grads.size(), 0.0f);
  for (int b = 0; b < B; ++b) {
    const model::Batch one{1, S, data.batch.tokens + b * S, data.batch.targets + b * S, nullptr};
    const Result single = run_pipeline(config, pipeline, ranks, one, scale, seed);
    sequential.loss_sum += single.loss_sum;
    sequential.count += single.count;
    for (size_t n = 0; n < single.grads.size(); ++n) sequential.grads[n] += single.grads[n];
  }
  // Same maths; the weight gradients sum B·c rows in one GEMM instead of c rows B times, and the loss
  // sums in another order: fp32 rounding only, bounded by what the model's sums are.
  EXPECT_EQ(batched.count, sequential.count);
  const double loss_bound = testing::fp32_bound(testing::transformer_loss_reordering(config, B * S, S, sequential.count));
  const double grad_bound = testing::fp32_bound(testing::transformer_reordering(config, B * S, S, true));
  const double loss_error = std::abs(batched.loss_sum - sequential.loss_sum) / sequential.loss_sum;
  const double grad_error = testing::relative_error(batched.grads, sequential.grads);
  std::printf("[ error    ] loss %.2e (bound %.2e), gradients %.2e (bound %.2e)\n", loss_error, loss_bound, grad_error,
              grad_bound);
  EXPECT_LE(loss_error, loss_bound);
  EXPECT_LE(grad_error, grad_bound);
}

// The masked pipeline on P = 1 and 2 ranks against the unchunked model with the same element mask
// (`want`): chunked LSE merges and per-rank partial sums give fp32 rounding only (bounded as in the
// invariance test); offloaded to `offload` and recomputed it is bitwise the same.
void expect_masked_pipeline_equals(const model::ModelConfig& config, const RunSpec& pipeline,
                                   const char* offload, const Data& data, const Result& want, uint64_t seed) {
  for (const int ranks : {1, 2}) {
    const Result got = run_pipeline(config, pipeline, ranks, data, seed);
    const double loss_error = std::abs(got.loss_sum / got.count - want.loss_sum / want.count) /
                              (want.loss_sum / want.count);
    const double grad_error = testing::relative_error(got.grads, want.grads);
    const int64_t tokens = data.batch.B * data.batch.T;
    const double loss_bound =
        testing::fp32_bound(testing::transformer_loss_reordering(config, tokens, data.batch.T, want.count));
    const double grad_bound = testing::fp32_bound(testing::transformer_reordering(config, tokens, data.batch.T, true));
    std::printf("[ error    ] P %d: loss %.2e (bound %.2e), gradients %.2e (bound %.2e)\n", ranks, loss_error, loss_bound,
                grad_error, grad_bound);
    EXPECT_LE(loss_error, loss_bound) << "P " << ranks;
    EXPECT_LE(grad_error, grad_bound) << "P " << ranks;
    RunSpec other = pipeline;
    other.offload = parse_offload(offload);
    other.recompute = Recompute::layer;
    const Result offloaded = run_pipeline(config, other, ranks, data, seed);
    EXPECT_EQ(offloaded.loss_sum, got.loss_sum) << "P " << ranks;
    EXPECT_EQ(0, std::memcmp(offloaded.grads.data(), got.grads.data(), got.grads.size() * sizeof(float)))
        << "P " << ranks;
  }
}

// Packed documents: with document ids the pipeline must equal the unchunked model with the same
// element mask, and the blocks no document spans are skipped (they are absent from the schedule).
TEST(Pipeline, DocumentMaskEqualsTheUnchunkedModel) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const model::ModelConfig config = tiny(model::Family::llama, 4, 2);
  const int B = 2;
  const int64_t S = 48;
  Data data(rng, B, S, config.vocab_size);
  // Chunks of 12 tokens (u = 4): documents [0, 12), [12, 36), [36, 48) in sequence 0; in sequence 1
  // [0, 5), [5, 12), [12, 36), [36, 48). Only blocks (2, 1) and the diagonal are live: 5 of 10.
  std::vector<int32_t> docs;
  for (int64_t t = 0; t < S; ++t) docs.push_back(t < 12 ? 0 : t < 36 ? 1 : 2);
  for (int64_t t = 0; t < S; ++t) docs.push_back(t < 5 ? 10 : t < 12 ? 11 : t < 36 ? 12 : 13);
  data.batch.doc_ids = docs.data();
  EXPECT_EQ(make_block_mask(make_chunk_plan(S, 1, 0, 0, 4), 0, docs.data(), B).live_count(), 5);
  const Result want = run_unchunked(config, data, seed);

  RunSpec pipeline;
  pipeline.chunks = 4;
  pipeline.offload = parse_offload("none");
  expect_masked_pipeline_equals(config, pipeline, "disk:/tmp", data, want, seed);
}

// A sliding window (Mistral, Qwen2) in the first layer and none in the second: the pipeline skips the
// blocks wholly out of the window (absent from that layer's program) and must equal the unchunked model
// with the same element mask, chunked and on P = 2, offloaded and recomputed bitwise.
TEST(Pipeline, SlidingWindowEqualsTheUnchunkedModel) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  model::ModelConfig config = tiny(model::Family::llama, 4, 2);
  config.sliding_window = 10;
  config.sliding_layers = {true, false};
  const int64_t S = 48;
  const Data data(rng, 2, S, config.vocab_size);
  const Result want = run_unchunked(config, data, seed);

  RunSpec pipeline;
  pipeline.chunks = 4;  // C = 12: under the window only blocks (i, i) and (i, i − 1) are live (the nearest
                        // pair of (i, i − 2) is 13 tokens apart)
  pipeline.offload = parse_offload("none");
  {
    auto backend = kernels::make_backend(kernels::BackendKind::cpu);
    auto local = comm::make_local();
    const FpdtModel model(config, *backend, *local, pipeline);
    const Schedule schedule = model.schedule_for(S, Pass::forward_backward);
    ASSERT_EQ(schedule.masks.size(), 2u);
    EXPECT_EQ(schedule.masks[0].describe(), "causal, window 10 tokens (7 of 10 causal blocks live)");
    EXPECT_EQ(schedule.masks[1].live_count(), 10);
  }
  expect_masked_pipeline_equals(config, pipeline, "ram", data, want, seed);
}

// Offload traffic (issue 13): the bytes a step moves to and from the offload tier are the schedule's
// fetches and writes (what the dry run counts is what a step moves), and blocks a mask removes move
// nothing — a window-W model's traffic grows by the same bytes for every chunk added (the window's
// needs), a causal one's by more each time (S's), and documents of one chunk each move what a window of
// one token does (the diagonal blocks only).
TEST(Pipeline, OffloadTrafficIsTheSchedulesAndWhatTheMaskLeaves) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  auto local = comm::make_local();
  const int64_t C = 12;
  model::ModelConfig windowed = tiny(model::Family::llama, 4, 2);
  windowed.sliding_window = C;
  windowed.sliding_layers = {true, true};
  const model::ModelConfig causal = tiny(model::Family::llama, 4, 2);
  RunSpec pipeline;
  pipeline.chunk_tokens = C;
  pipeline.offload = parse_offload("ram");
  auto counted = [&](const model::ModelConfig& config, int chunks) {
    FpdtModel model(config, *backend, *local, pipeline);
    model.dry_run(chunks * C, 2);
    return model.traffic();
  };
  auto total = [](const OffloadTraffic& t) { return t.read_bytes + t.written_bytes; };

  // Measured = counted, windowed and causal, whole steps and forward passes.
  for (const model::ModelConfig* config : std::vector<const model::ModelConfig*>{&windowed, &causal}) {
    const Data data(rng, 2, 5 * C, config->vocab_size);
    const Result step = run_pipeline(*config, pipeline, 1, data, seed);
    EXPECT_EQ(step.traffic, counted(*config, 5));
    EXPECT_GT(step.traffic.read_bytes, 0u);
    EXPECT_GT(step.traffic.written_bytes, 0u);
  }
  // The window's increments are equal once a chunk has a previous one; the causal ones grow.
  uint64_t previous_window = 0, previous_causal = 0, window_step = 0, causal_step = 0;
  for (int chunks = 1; chunks <= 8; ++chunks) {
    const uint64_t window = total(counted(windowed, chunks)), full = total(counted(causal, chunks));
    if (chunks >= 3) {
      EXPECT_EQ(window - previous_window, window_step) << chunks << " chunks";
      EXPECT_GT(full - previous_causal, causal_step) << chunks << " chunks";
    }
    window_step = window - previous_window;
    causal_step = full - previous_causal;
    previous_window = window;
    previous_causal = full;
  }
  // Documents of one chunk each move what a window of one token does: the diagonal blocks only.
  const int64_t S = 5 * C;
  Data data(rng, 2, S, causal.vocab_size);
  std::vector<int32_t> docs(static_cast<size_t>(2 * S));
  for (size_t n = 0; n < docs.size(); ++n) docs[n] = static_cast<int32_t>(n / C);
  data.batch.doc_ids = docs.data();
  model::ModelConfig one_token = causal;
  one_token.sliding_window = 1;
  one_token.sliding_layers = {true, true};
  EXPECT_EQ(run_pipeline(causal, pipeline, 1, data, seed).traffic, counted(one_token, 5));
  EXPECT_LT(total(counted(one_token, 5)), total(counted(causal, 5)));
}

// A bf16 run's store holds its activation arrays and dO in bf16 (LSE, Δ and the gradients that are summed
// into, d_res and dQ, stay fp32; dQ in the slots of o and o_local, dead by then): the dry run counts what
// the real run allocates, to the byte, in both tiers
// (the chunk buffers are fp32 lanes with bf16 twins for the arrays that go out and come in), and the store
// is its closed form (docs/memory.md §7) in both precisions. Measured on the demo model's shape with
// realistic chunks (every slot is then whole 4 KiB transfer blocks, so the closed form is exact).
TEST(Pipeline, Bf16StoreIsHalfTheActivationsAndTheDryRunIsTheRealRun) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  auto local = comm::make_local();
  for (const char* offload : {"ram", "none"}) {
    SCOPED_TRACE(offload);
    const bool resident = std::string(offload) == "none";
    // The dry run's counts against a real step's allocation (the tiny model: a real step is quick).
    const model::ModelConfig config = tiny(model::Family::llama, 4, 2);
    RunSpec pipeline;
    pipeline.chunks = 3;
    pipeline.offload = parse_offload(offload);
    pipeline.precision = kernels::Precision::bf16;
    const Data data(rng, 2, 45, config.vocab_size);
    size_t dry_compute = 0, dry_offload = 0;
    {
      FpdtModel model(config, *backend, *local, pipeline, seed);
      const size_t compute = MemoryTiers::instance().usage(Tier::compute).active_bytes;
      const size_t offloaded = MemoryTiers::instance().usage(Tier::offload).active_bytes;
      model.dry_run(45, 2);
      dry_compute = MemoryTiers::instance().usage(Tier::compute).active_bytes - compute;
      dry_offload = MemoryTiers::instance().usage(Tier::offload).active_bytes - offloaded;
      const LayoutShape layout = model.layout_shape(45, 2);
      EXPECT_EQ(layout.activation_bytes, 2);
      EXPECT_EQ(dry_compute, chunk_arena_bytes(layout) + (resident ? store_bytes(layout) : 0));
      EXPECT_EQ(dry_offload, resident ? 0 : store_bytes(layout));
    }
    {
      FpdtModel model(config, *backend, *local, pipeline, seed);
      const size_t compute = MemoryTiers::instance().usage(Tier::compute).active_bytes;
      const size_t offloaded = MemoryTiers::instance().usage(Tier::offload).active_bytes;
      model.forward_backward(data.batch, 1.0);
      EXPECT_EQ(MemoryTiers::instance().usage(Tier::compute).active_bytes - compute, dry_compute);
      EXPECT_EQ(MemoryTiers::instance().usage(Tier::offload).active_bytes - offloaded, dry_offload);
    }

    // Bytes per token: the demo model, 16 chunks of 256 tokens, 2 sequences.
    const model::ModelConfig demo = model::preset("llama-demo");
    const int64_t tokens = 2 * 16 * 256;
    auto store = [&](kernels::Precision precision, std::optional<StoreGroup> group) {
      RunSpec p = pipeline;
      p.chunk_tokens = 256;
      p.precision = precision;
      const FpdtModel model(demo, *backend, *local, p, seed);
      return static_cast<double>(store_bytes(model.layout_shape(16 * 256, 2), group));
    };
    // The closed form per token, a bytes per activation element: layer inputs (L + 1)·a·h; per layer
    // (recompute none) a·(h + 3q + 2kv) + 4·Hq, and 3a·f of MLP activations when resident; the layer in
    // backward's d_res and dO in a and Δ in fp32, a·(h + q) + 4·Hq, dQ (fp32) in the slots of its o and
    // o_local (P = 1: kv_heads = kv).
    const double h = demo.hidden, q = demo.q_dim(), kv = demo.kv_dim(), Hq = demo.heads, f = demo.ffn_hidden,
                 L = demo.layers;
    auto per_token = [&](double a, StoreGroup group) {
      switch (group) {
        case StoreGroup::inputs: return (L + 1) * a * h;
        case StoreGroup::activations: return L * (a * (h + 3 * q + 2 * kv) + 4 * Hq + (resident ? 3 * a * f : 0.0));
        case StoreGroup::gradients: return a * (h + q) + 4 * Hq;
      }
      return 0.0;
    };
    using kernels::Precision;
    for (const StoreGroup group : {StoreGroup::inputs, StoreGroup::activations, StoreGroup::gradients}) {
      EXPECT_EQ(store(Precision::fp32, group), per_token(4, group) * tokens) << static_cast<int>(group);
      EXPECT_EQ(store(Precision::bf16, group), per_token(2, group) * tokens) << static_cast<int>(group);
    }
    const double fp32 = store(Precision::fp32, std::nullopt), bf16 = store(Precision::bf16, std::nullopt);
    // The activations (layer inputs and the layers' kept activations): bf16 except the LSE (H fp32 per
    // token and layer beside the ~6h of the others: < 1 % more than half).
    const double activations_fp32 = store(Precision::fp32, StoreGroup::inputs) +
                                    store(Precision::fp32, StoreGroup::activations);
    const double activations_bf16 = store(Precision::bf16, StoreGroup::inputs) +
                                    store(Precision::bf16, StoreGroup::activations);
    std::printf("[ bytes    ] %s: store bf16 / fp32 %.4f; activations %.4f; gradients of one layer %.0f of %.0f"
                " (fp32 run: %.0f)\n",
                offload, bf16 / fp32, activations_bf16 / activations_fp32, store(Precision::bf16, StoreGroup::gradients),
                bf16, store(Precision::fp32, StoreGroup::gradients));
    EXPECT_LE(activations_bf16 / activations_fp32, 0.51);
  }
}

// Issue 46: one sharding rule for every (Hq, Hkv, P ≤ Hq). Checked against its definition (ulysses.h) on
// fresh random layouts: the ranks' q heads tile [0, Hq) in rank order, ⌊Hq/P⌋ or ⌈Hq/P⌉ each; each local q
// head finds the kv head it reads (j / g) in its slot (i / G_r); every kv head some rank's q heads read is
// sent; and the even split (Hkv % P == 0) and replication (P % Hkv == 0) come out as they always were.
TEST(Ulysses, EveryRankHoldsTheKvHeadsItsQueryHeadsRead) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  for (int draw = 0; draw < 200; ++draw) {
    const HeadDraw layout = draw_heads(rng, static_cast<HeadCase>(draw % static_cast<int>(HeadCase::count)), 0);
    const int H = layout.heads, Hkv = layout.kv_heads, P = layout.ranks, g = H / Hkv;
    int next = 0, slots = 0;
    for (int r = 0; r < P; ++r) {
      const HeadSharding sharding = make_head_sharding(H, Hkv, P, r);
      ASSERT_EQ(sharding.q_head_begin(r), next);
      ASSERT_TRUE(sharding.local_q_heads == H / P || sharding.local_q_heads == (H + P - 1) / P);
      ASSERT_EQ(sharding.local_q_heads % sharding.local_kv_heads, 0);
      const int per_slot = sharding.local_q_heads / sharding.local_kv_heads;
      for (int i = 0; i < sharding.local_q_heads; ++i)
        ASSERT_EQ(sharding.kv_head_of_slot(r, i / per_slot), (next + i) / g) << H << "/" << Hkv << " over " << P;
      if (Hkv % P == 0) {
        EXPECT_EQ(sharding.local_kv_heads, Hkv / P);
      }
      if (P % Hkv == 0 && H % P == 0) {
        EXPECT_EQ(sharding.local_kv_heads, 1);
      }
      next += sharding.local_q_heads;
      slots += sharding.local_kv_heads;
    }
    EXPECT_EQ(next, H);
    EXPECT_EQ(make_head_sharding(H, Hkv, P, 0).kv_send_heads(), slots);
    EXPECT_EQ(make_head_sharding(H, Hkv, P, 0).imbalance() == 1.0, H % P == 0);
  }
}

TEST(Ulysses, MoreRanksThanHeadsAreRefusedBeforeCompute) {
  testing::expect_contains(testing::error_message([] { make_head_sharding(6, 2, 7, 0); }),
                           {"[ulysses]", "--sp 7", "6 attention heads", "at most 6"});
  testing::expect_contains(testing::error_message([] { make_head_sharding(6, 4, 2, 0); }),
                           {"[ulysses]", "4 key/value heads", "6 attention heads"});
}

// Issue 46: the sp = P pipeline equals the sp = 1 pipeline for random head layouts, uneven ones included
// (each HeadCase is drawn; printed with the seed). Both sides compute the same maths in another order (the
// chunk plan's LSE merges, per-rank partial weight gradients, the kv gradients summed over the ranks that
// hold a head): fp32 rounding only, fp32_bound of the model's sums (which counts both sides' errors). The
// P-rank side is offloaded in turn to none, RAM and disk, which the invariance tests above hold bitwise
// equal to resident. Every other draw runs in bf16 (a bf16 store: d_q in the slots of o and o_local, which
// the largest rank of an uneven split widens), both sides bf16: bf16_bound of the model's roundings.
TEST(Pipeline, AnyHeadLayoutOnPRanksEqualsOneRank) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const char* offloads[] = {"none", "ram", "disk:/tmp"};
  std::array<std::array<double, 2>, 2> worst{};  // [bf16][loss, gradients]: the largest error / bound
  const int draws = 30;
  for (int draw = 0; draw < draws; ++draw) {
    const HeadDraw layout = draw_heads(rng, static_cast<HeadCase>(draw % static_cast<int>(HeadCase::count)), 0);
    const model::ModelConfig config = tiny(model::Family::llama, layout.heads, layout.kv_heads);
    const int B = 1 + static_cast<int>(rng.below(2));
    const int64_t S = 2 * layout.ranks + static_cast<int64_t>(rng.below(40));
    const Data data(rng, B, S, config.vocab_size);
    RunSpec one;
    one.chunks = 1 + static_cast<int>(rng.below(3));
    one.offload.kind = OffloadKind::none;
    const bool bf16 = draw % 2 == 1;
    if (bf16) one.precision = kernels::Precision::bf16;
    RunSpec sharded = one;
    sharded.offload = parse_offload(offloads[draw % 3]);
    const Result want = run_pipeline(config, one, 1, data, seed);
    const Result got = run_pipeline(config, sharded, layout.ranks, data, seed);
    const double loss_bound =
        bf16 ? testing::bf16_bound(testing::bf16_roundings(config, false), true, want.count)
             : testing::fp32_bound(testing::transformer_loss_reordering(config, B * S, S, want.count));
    const double grad_bound = bf16 ? testing::bf16_bound(testing::bf16_roundings(config, true), true)
                                   : testing::fp32_bound(testing::transformer_reordering(config, B * S, S, true));
    const double want_mean = want.loss_sum / want.count;
    const double loss_error = std::abs(got.loss_sum / got.count - want_mean) / want_mean;
    const double grad_error = testing::relative_error(got.grads, want.grads);
    std::printf("[ draw %2d  ] Hq %2d Hkv %2d P %d (imbalance %.3f) B %d S %3lld u %d %-9s %s: loss %.2e (bound %.2e), "
                "gradients %.2e (bound %.2e)\n",
                draw, layout.heads, layout.kv_heads, layout.ranks,
                make_head_sharding(layout.heads, layout.kv_heads, layout.ranks, 0).imbalance(), B,
                static_cast<long long>(S), one.chunks, offloads[draw % 3], bf16 ? "bf16" : "fp32", loss_error, loss_bound,
                grad_error, grad_bound);
    EXPECT_DOUBLE_EQ(got.count, want.count);
    EXPECT_LE(loss_error, loss_bound) << "draw " << draw;
    EXPECT_LE(grad_error, grad_bound) << "draw " << draw;
    worst[bf16] = {std::max(worst[bf16][0], loss_error / loss_bound), std::max(worst[bf16][1], grad_error / grad_bound)};
  }
  std::printf("[ error    ] %d draws: worst error / bound, fp32: loss %.3f, gradients %.3f; bf16: loss %.3f, gradients "
              "%.3f\n",
              draws, worst[0][0], worst[0][1], worst[1][0], worst[1][1]);
}

}  // namespace
}  // namespace fpdt::pipeline

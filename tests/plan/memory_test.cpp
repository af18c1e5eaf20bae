// The memory and cost models, number by number: the worked example of docs/memory.md (Llama-3-8B on
// 4 A100-80GB ranks) and, for our fpdt mode, the pipeline's own allocation list (FpdtModel::reserve)
// written out independently here as the oracle, so a change on either side shows up.
#include <gtest/gtest.h>

#include <cmath>

#include "fpdt/plan/plan.h"
#include "fpdt/train/metrics.h"
#include "testing.h"

namespace fpdt::plan {
namespace {

constexpr double GiB = 1073741824.0;
constexpr int64_t K = 1024, M = 1024 * 1024;

PlanConfig llama8b_on_4(Mode mode, int64_t seq_tokens) {
  PlanConfig config;
  config.model = model::preset("llama3-8b");
  config.sp = 4;
  config.seq_tokens = seq_tokens;
  config.mode = mode;
  return config;
}

double component(const PlanResult& plan, const std::string& name, Phase phase) {
  for (const Component& c : plan.components)
    if (c.name == name && c.phase == phase) return c.bytes;
  ADD_FAILURE() << "no component '" << name << "' in phase " << phase_name(phase);
  return 0;
}

TEST(MemoryModel, WorkedExampleModelStates) {
  // docs/memory.md §3: N = 8,030,261,248, W = 4, bf16.
  const PlanResult plan = make_plan(llama8b_on_4(Mode::fpdt_reference, 1 * M), hardware_preset("A100-80GB"));
  const double N = 8030261248.0;
  EXPECT_EQ(plan.shape.params, 8030261248);
  EXPECT_DOUBLE_EQ(component(plan, "weights", Phase::always), 2 * N / 4);
  EXPECT_DOUBLE_EQ(component(plan, "gradients (fp32)", Phase::always), 4 * N / 4);
  EXPECT_DOUBLE_EQ(component(plan, "optimizer: Adam m, v + fp32 master", Phase::always), 12 * N / 4);
  EXPECT_DOUBLE_EQ(component(plan, "ZeRO-3 gathered weight + gradient", Phase::always), 2 * 2 * 128256.0 * 4096);
}

TEST(MemoryModel, WorkedExampleUlysses) {
  // §5: S = 128K, T = 32768. The loss dominates: 14·V + 2·a·h bytes per token.
  const PlanResult plan = make_plan(llama8b_on_4(Mode::ulysses, 128 * K), hardware_preset("A100-80GB"));
  EXPECT_DOUBLE_EQ(component(plan, "logits + cross-entropy (whole T)", Phase::loss),
                   (14.0 * 128256 + 4.0 * 4096) * 32768);
  EXPECT_DOUBLE_EQ(component(plan, "activation checkpoints", Phase::always), 32.0 * 2 * 4096 * 32768);
  EXPECT_EQ(plan.compute_peak.phase, Phase::loss);
  EXPECT_FALSE(plan.fits);
  EXPECT_EQ(plan.bound, "compute tier");
  EXPECT_NEAR(plan.compute_peak.bytes / GiB, 91.03, 0.01);
}

TEST(MemoryModel, WorkedExampleReference) {
  // §6: S = 1M, C = 64K: T = 262144, c = 16384.
  const PlanResult plan = make_plan(llama8b_on_4(Mode::fpdt_reference, 1 * M), hardware_preset("A100-80GB"));
  EXPECT_EQ(plan.shape.C, 65536);
  EXPECT_EQ(plan.shape.c, 16384);
  EXPECT_DOUBLE_EQ(component(plan, "activation checkpoints", Phase::always), 64 * GiB);
  EXPECT_DOUBLE_EQ(component(plan, "resident (T, h) tensors", Phase::attention_backward), 12 * GiB);
  EXPECT_DOUBLE_EQ(component(plan, "chunked loss + fp32 head gradient", Phase::loss),
                   14.0 * 128256 * 16384 + 4.0 * 128256 * 4096);
  EXPECT_EQ(plan.compute_peak.phase, Phase::loss);
  EXPECT_NEAR(plan.compute_peak.bytes / GiB, 71.97, 0.01);
  EXPECT_EQ(plan.offload_peak.phase, Phase::attention_backward);
  EXPECT_NEAR(plan.offload_peak.bytes / GiB, 77.03, 0.01);
  EXPECT_TRUE(plan.fits);
}

// FpdtModel::reserve(), transcribed: the arena's float buffers and the store's arrays (fp32 on CPU).
double pipeline_arena_bytes(const PlanShape& s) {
  auto aligned = [](int64_t bytes) { return static_cast<double>((bytes + 4095) / 4096 * 4096); };
  const int64_t c = s.C / s.P, C = s.C, h = s.h, f = s.f, q = s.q, kv = s.kv, D = s.D, V = s.V;
  const int64_t local_q = s.Hq / s.P, local_kv = std::max<int64_t>(s.Hkv / s.P, 1);
  const int64_t qh = C * local_q * D, kvh = C * local_kv * D, lse = local_q * C;
  const int64_t head_tokens = std::clamp<int64_t>((32 << 20) / (4 * V), 1, c);
  const int64_t pack = c * std::max<int64_t>(s.Hq, local_kv * s.P) * D;
  const int64_t ch = c * h, cf = c * f, cq = c * q, ckv = c * kv;
  const std::vector<int64_t> float_sizes = {
      ch, ch, ch, ch, c, c, cq, ckv, ckv, qh, kvh, kvh, kvh, kvh, kvh, kvh, qh, lse, cq, ch, c, c, cf, cf,
      cf, pack, head_tokens * V, head_tokens, head_tokens, ch, cq, qh, lse, kvh, kvh, qh, qh, qh, qh,
      lse, lse, lse, lse, qh, qh, qh, cq, ckv, ckv, ch, cf, cf, cf};
  double total = 4 * aligned(c * 4) + aligned(c * 8);  // tokens, targets, position ids, mask; positions
  for (int64_t floats : float_sizes) total += aligned(floats * 4);
  return total;
}

double pipeline_store_bytes(const PlanShape& s, int64_t stored) {
  auto slot = [](int64_t floats) { return static_cast<double>((floats * 4 + 4095) / 4096 * 4096); };
  const int64_t c = s.C / s.P, u = s.u, h = s.h, q = s.q, D = s.D;
  const int64_t local_q = s.Hq / s.P, local_kv = std::max<int64_t>(s.Hkv / s.P, 1);
  const int64_t qh = s.C * local_q * D, kvh = s.C * local_kv * D, lse = local_q * s.C;
  return (s.L + 1) * u * slot(c * h) + stored * u * (slot(c * h) + 2 * slot(qh) + 2 * slot(kvh) + slot(c * q) + slot(lse)) +
         u * (slot(c * h) + slot(qh) + slot(lse) + slot(qh));
}

TEST(MemoryModel, FpdtModeMirrorsThePipelineAllocations) {
  const Hardware cpu = hardware_preset("cpu");
  for (const char* name : {"llama-tiny", "gpt-tiny", "llama-demo"}) {
    for (const int64_t P : {1, 2, 4}) {
      for (const Recompute recompute : {Recompute::layer, Recompute::none}) {
        PlanConfig config;
        config.model = model::preset(name);
        config.sp = P;
        config.seq_tokens = 1024;
        config.chunk_tokens = 128;
        config.mode = Mode::fpdt;
        config.recompute = recompute;
        config.zero_stage = 0;
        config.precision = DType::f32;
        const PlanResult plan = make_plan(config, cpu);
        SCOPED_TRACE(std::string(name) + " P=" + std::to_string(P));
        EXPECT_DOUBLE_EQ(fpdt_chunk_arena_bytes(plan.shape), pipeline_arena_bytes(plan.shape));
        const int64_t stored = recompute == Recompute::layer ? 1 : plan.shape.L;
        EXPECT_DOUBLE_EQ(plan.offload_peak.bytes, pipeline_store_bytes(plan.shape, stored));
        // Compute tier: fp32 parameters, gradients, Adam m and v (16 B per parameter) + the arena.
        EXPECT_DOUBLE_EQ(plan.compute_peak.bytes,
                         16.0 * static_cast<double>(config.model.parameter_count()) + pipeline_arena_bytes(plan.shape));
      }
    }
  }
}

TEST(MemoryModel, FpdtComputeTierDoesNotGrowWithTheSequence) {
  PlanConfig config = llama8b_on_4(Mode::fpdt, 1 * M);
  config.chunk_tokens = 16 * K;
  const Hardware a100 = hardware_preset("A100-80GB");
  const PlanResult short_plan = make_plan(config, a100);
  config.seq_tokens = 16 * M;
  const PlanResult long_plan = make_plan(config, a100);
  EXPECT_DOUBLE_EQ(long_plan.compute_peak.bytes, short_plan.compute_peak.bytes);
  EXPECT_NEAR(long_plan.offload_peak.bytes / short_plan.offload_peak.bytes, 16.0, 1e-9);
}

TEST(CostModel, FlopsAndAllToAll) {
  const PlanResult plan = make_plan(llama8b_on_4(Mode::fpdt, 1 * M), hardware_preset("A100-80GB"));
  // Model FLOPs: the trainer's convention (train::model_flops), per rank; it also counts the norm
  // weights, which the plan's matmul count leaves out (< 0.01 %).
  const double trainer = train::model_flops(model::preset("llama3-8b"), 1, 1 * M) / 4;
  EXPECT_NEAR(plan.flops.model / trainer, 1.0, 1e-4);
  // Recompute = layer: forward twice, backward 2× dense and 2.5× attention.
  const double T = 262144, L = 32, q = 4096, kv = 1024;
  const double attention_forward = 2.0 * (1 * M) * (1.0 * M) * q / 4 * L;
  EXPECT_DOUBLE_EQ(plan.flops.attention, 4.5 * attention_forward);
  // All-to-all: (2·Hq + 2·Hkv)·D·(P − 1)/P elements per local token per layer and pass (forward,
  // recompute, backward), bf16.
  EXPECT_DOUBLE_EQ(plan.traffic.all_to_all_bytes, L * 3 * (2 * q + 2 * kv) * 2 * T * 3 / 4);
  // ZeRO-3 over 4 ranks: two all-gathers of the bf16 weights and a reduce-scatter of the gradients.
  EXPECT_DOUBLE_EQ(plan.traffic.zero_bytes, 3 * 2 * 8030261248.0 * 3 / 4);
}

TEST(CostModel, SmallestChunkThatHides) {
  const Hardware a100 = hardware_preset("A100-80GB");
  PlanConfig config = llama8b_on_4(Mode::fpdt, 1 * M);
  const PlanResult automatic = make_plan(config, a100);
  const int64_t chunk = automatic.prefetch.smallest_hiding_chunk;
  EXPECT_EQ(automatic.shape.C, chunk);
  EXPECT_TRUE(automatic.prefetch.hides);
  EXPECT_GE(static_cast<double>(chunk), automatic.prefetch.min_hiding_chunk_tokens);
  // The next smaller valid chunk does not hide (it is below the bound, which here is bandwidth's).
  config.chunk_tokens = chunk / 2;
  const PlanResult smaller = make_plan(config, a100);
  EXPECT_FALSE(smaller.prefetch.hides);
  EXPECT_GT(smaller.time.copy_exposed_s, 0);
  EXPECT_EQ(automatic.time.copy_exposed_s, 0);
  // The bound: backward block 10·C·c·q FLOPs at 312 TFLOP/s · 0.6 against (2aq + 8Hq + 4q)·c bytes
  // at 25 GB/s → C ≥ 6037 tokens.
  const double F = 312e12 * 0.6, bw = 25e9, q = 4096, Hq = 32;
  EXPECT_NEAR(automatic.prefetch.min_hiding_chunk_tokens, (4 * q + 8 * Hq + 4 * q) * F / (10 * q * bw), 1e-6);
  // A slow disk needs a longer chunk.
  config.chunk_tokens = 0;
  config.offload = OffloadTier::disk;
  EXPECT_GT(make_plan(config, a100).shape.C, chunk);
}

}  // namespace
}  // namespace fpdt::plan

// The memory and cost models, number by number: the worked example of docs/memory.md (Llama-3-8B on
// 4 A100-80GB ranks) and, for our fpdt mode, that the plan reads the pipeline's own memory table with
// the pipeline's own shape, and that the pipeline allocates exactly that table.
#include <gtest/gtest.h>

#include <cmath>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/fpdt_model.h"
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
  config.run.sp = 4;
  config.run.seq_tokens = seq_tokens;
  config.run.mode = mode;
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

// The plan's fpdt mode reads the pipeline's memory table through fpdt_layout(): the shape it hands the
// table must be the one the pipeline itself lays out (rank 0 of P thread ranks), in fp32 and in bf16 (its
// store in bf16), and the plan's peaks are the table's sums plus the fp32 model states.
TEST(MemoryModel, FpdtModeReadsThePipelinesOwnLayout) {
  const Hardware cpu = hardware_preset("cpu");
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  for (const char* name : {"llama-tiny", "gpt-tiny", "llama-demo"}) {
    for (const int P : {1, 2, 4}) {
      for (const Recompute recompute : {Recompute::layer, Recompute::none}) {
        for (const int B : {1, 3}) {
          for (const Precision precision : {Precision::fp32, Precision::bf16}) {
            PlanConfig config;
            config.model = model::preset(name);
            config.run.sp = P;
            config.run.batch_size = B;
            config.run.seq_tokens = 1024;
            config.run.chunk_tokens = 128;
            config.run.mode = Mode::fpdt;
            config.run.recompute = recompute;
            config.run.zero = 0;
            config.run.precision = precision;
            const PlanResult plan = make_plan(config, cpu);
            SCOPED_TRACE(std::string(name) + " P=" + std::to_string(P) + " B=" + std::to_string(B) + " " +
                         pipeline::spelling(precision));
            const pipeline::LayoutShape layout = fpdt_layout(config, plan.shape);
            pipeline::RunSpec pipeline;
            pipeline.chunk_tokens = 128;
            pipeline.precision = precision;
            pipeline.recompute = recompute == Recompute::layer ? pipeline::Recompute::layer : pipeline::Recompute::none;
            comm::run_ranks(P, [&](comm::Communicator& comm) {
              if (comm.rank() != 0) return;
              const pipeline::FpdtModel model(config.model, *backend, comm, pipeline);
              EXPECT_TRUE(model.layout_shape(config.run.seq_tokens, B) == layout);
            });
            EXPECT_DOUBLE_EQ(plan.offload_peak.bytes, static_cast<double>(pipeline::store_bytes(layout)));
            // Compute tier: the model states' table (ZeRO 0: fp32 weights, gradients, Adam m and v: 16 B a
            // parameter, and in bf16 the weights' bf16 working copy, 2 B more; with the layout's alignment)
            // + the arena.
            pipeline::StateShape states_shape;
            states_shape.run.precision = precision;
            double states = 0;
            for (const pipeline::StateSpec& spec :
                 pipeline::model_state_buffers(model::ParameterLayout(config.model), states_shape))
              states += static_cast<double>(spec.bytes());
            const double per_parameter = precision == Precision::bf16 ? 18.0 : 16.0;
            EXPECT_NEAR(states, per_parameter * static_cast<double>(config.model.parameter_count()), 0.01 * states);
            EXPECT_DOUBLE_EQ(plan.compute_peak.bytes,
                             states + static_cast<double>(pipeline::chunk_arena_bytes(layout)));
          }
        }
      }
    }
  }
}

// The pipeline allocates the table and nothing else: a dry run adds the arena to the compute tier and
// the store to the offload tier (or, resident, to the compute tier), to the byte.
TEST(MemoryModel, FpdtDryRunAllocatesTheTable) {
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  auto local = comm::make_local();
  const model::ModelConfig config = model::preset("llama-tiny");
  for (const char* offload : {"ram", "none"}) {
    pipeline::RunSpec pipeline;
    pipeline.chunk_tokens = 256;
    pipeline.offload = pipeline::parse_offload(offload);
    pipeline::FpdtModel model(config, *backend, *local, pipeline);
    const pipeline::LayoutShape layout = model.layout_shape(4096, 2);
    const size_t compute = MemoryTiers::instance().usage(Tier::compute).active_bytes;
    const size_t offloaded = MemoryTiers::instance().usage(Tier::offload).active_bytes;
    model.dry_run(4096, 2);
    const size_t store = pipeline::store_bytes(layout), arena = pipeline::chunk_arena_bytes(layout);
    const bool resident = std::string(offload) == "none";
    SCOPED_TRACE(offload);
    EXPECT_EQ(MemoryTiers::instance().usage(Tier::compute).active_bytes - compute, arena + (resident ? store : 0));
    EXPECT_EQ(MemoryTiers::instance().usage(Tier::offload).active_bytes - offloaded, resident ? 0 : store);
    // Rows are B·c: twice the sequences, twice the rows of every chunk buffer (the LM head's logits
    // are capped by bytes, and the per-sequence all-to-all packing does not grow).
    EXPECT_EQ(layout.rows(), 2 * model.layout_shape(4096, 1).rows());
    EXPECT_EQ(pipeline::store_bytes(layout), 2 * pipeline::store_bytes(model.layout_shape(4096, 1)));
  }
}

TEST(MemoryModel, FpdtComputeTierDoesNotGrowWithTheSequence) {
  PlanConfig config = llama8b_on_4(Mode::fpdt, 1 * M);
  config.run.chunk_tokens = 16 * K;
  const Hardware a100 = hardware_preset("A100-80GB");
  const PlanResult short_plan = make_plan(config, a100);
  config.run.seq_tokens = 16 * M;
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
  config.run.chunk_tokens = chunk / 2;
  const PlanResult smaller = make_plan(config, a100);
  EXPECT_FALSE(smaller.prefetch.hides);
  EXPECT_GT(smaller.time.copy_exposed_s, 0);
  EXPECT_EQ(automatic.time.copy_exposed_s, 0);
  // The bound: backward block 10·C·c·q FLOPs at 312 TFLOP/s · 0.6 against (2aq + 8Hq + 4q)·c bytes
  // at 25 GB/s → C ≥ 6037 tokens.
  const double F = 312e12 * 0.6, bw = 25e9, q = 4096, Hq = 32;
  EXPECT_NEAR(automatic.prefetch.min_hiding_chunk_tokens, (4 * q + 8 * Hq + 4 * q) * F / (10 * q * bw), 1e-6);
  // A slow disk needs a longer chunk.
  config.run.chunk_tokens = 0;
  config.run.offload.kind = OffloadKind::disk;
  EXPECT_GT(make_plan(config, a100).shape.C, chunk);
}

}  // namespace
}  // namespace fpdt::plan

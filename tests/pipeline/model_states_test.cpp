// A bf16 run's working copy of the weights (pipeline/model_states.h): after initialisation, after each
// AdamW step, after a load (a resume) and after refresh_working_copy, the bf16 words the GEMMs read are round_to_bf16 of the fp32
// masters, bit for bit, on every rank and stage — whole below stage 3, this rank's shards at 3. (That
// the stages then train alike, the gathered words included, is cli/zero_test's Bf16 test.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/config.h"
#include "fpdt/pipeline/model_states.h"
#include "fpdt/tensor/dtype.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

// Each unit's words of this rank's part against float_to_bf16 of the gathered masters.
void expect_working_copy_rounds_the_masters(ModelStates& states, const std::string& what) {
  const model::ParameterLayout& layout = states.layout();
  model::ParameterBlock masters(layout, "test: the gathered masters", Tier::offload);
  states.gather_weights(masters);
  int64_t mismatches = 0, checked = 0;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const ShardRange& own = states.own(static_cast<int>(u));
    std::vector<uint16_t> words(static_cast<size_t>(own.size()));
    states.read_working_copy(static_cast<int>(u), words.data());
    const float* unit_masters = masters.data() + layout.units()[u].begin + own.begin;
    for (int64_t i = 0; i < own.size(); ++i, ++checked)
      mismatches += words[static_cast<size_t>(i)] != float_to_bf16(unit_masters[i]);
  }
  EXPECT_GT(checked, 0) << what;
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << checked << " words are not the rounded masters";
}

TEST(WorkingCopy, IsTheRoundedMastersAfterInitEachStepAndLoad) {
  const uint64_t seed = testing::fresh_seed();
  const model::ModelConfig config = model::preset("llama-tiny");
  for (const int stage : {0, 1, 3}) {
    comm::run_ranks(2, [&](comm::Communicator& world) {
      auto backend = kernels::make_backend(kernels::BackendKind::cpu);
      RunSpec run;
      run.zero = stage;
      run.precision = kernels::Precision::bf16;
      ModelStates states(config, *backend, world, run, seed);
      const std::string tag = "ZeRO " + std::to_string(stage) + " rank " + std::to_string(world.rank());
      expect_working_copy_rounds_the_masters(states, tag + ", initialised");
      if (stage <= 1) {  // the whole gradient is host-writable here (the cpu backend's compute tier)
        for (int64_t step = 1; step <= 3; ++step) {
          states.zero_gradients();
          Rng rng(seed + static_cast<uint64_t>(step));  // the same gradient on both ranks
          model::ParameterBlock& grads = states.gradients();
          for (int64_t i = 0; i < grads.numel(); ++i) grads.data()[i] = static_cast<float>(rng.normal());
          states.reduce_gradients();
          kernels::AdamWParams hyper;
          hyper.lr = 1e-2;  // large enough that most words change every step
          hyper.step = step;
          states.adamw_update(hyper);
          expect_working_copy_rounds_the_masters(states, tag + ", after step " + std::to_string(step));
        }
      }
      model::ParameterBlock loaded(states.layout(), "test: weights to load", Tier::offload);
      Rng rng(seed ^ 0x5eedu);
      for (int64_t i = 0; i < loaded.numel(); ++i) loaded.data()[i] = static_cast<float>(rng.normal());
      states.load_weights(loaded);
      expect_working_copy_rounds_the_masters(states, tag + ", loaded");
      if (stage == 0) {  // written through weights() (host-writable here), then refreshed
        model::ParameterBlock& weights = states.weights();
        for (int64_t i = 0; i < weights.numel(); ++i) weights.data()[i] = static_cast<float>(rng.normal());
        states.refresh_working_copy();
        expect_working_copy_rounds_the_masters(states, tag + ", written and refreshed");
      }
    });
  }
}

// ZeRO-3 in bf16 gathers each unit as its bf16 words (2 bytes a value) plus its fp32 vectors, and the
// embeddings in fp32; in fp32 every unit at 4 bytes a value. A forward pass's gathers (the ZeRO plan's
// steps) on 2 ranks send exactly that: (P − 1) = 1 copy of this rank's share of each unit gathered.
TEST(WorkingCopy, ZeroThreeGathersTheWordsHalfTheBytes) {
  const model::ModelConfig config = model::preset("llama-tiny");
  const model::ParameterLayout layout(config);
  uint64_t sent[2] = {0, 0}, want[2] = {0, 0};  // fp32, bf16
  for (const kernels::Precision precision : {kernels::Precision::fp32, kernels::Precision::bf16}) {
    const bool bf16 = precision == kernels::Precision::bf16;
    comm::run_ranks(2, [&](comm::Communicator& world) {
      auto backend = kernels::make_backend(kernels::BackendKind::cpu);
      RunSpec run;
      run.zero = 3;
      run.precision = precision;
      ModelStates states(config, *backend, world, run, 11);
      const uint64_t before = states.bytes_sent();
      states.begin_pass(false);
      const std::vector<ZeroSegment>& pass = states.plan().pass(false);
      for (size_t segment = 0; segment < pass.size(); ++segment) {
        states.before_segment(static_cast<int>(segment));
        states.after_segment(static_cast<int>(segment));
      }
      states.end_pass();
      if (world.rank() != 0) return;
      sent[bf16] = states.bytes_sent() - before;
      for (const ZeroSegment& segment : pass)
        for (const ZeroStep& step : segment.before) {
          if (step.kind != ZeroStep::Kind::gather) continue;
          const ShardRange& own = states.own(step.unit);
          int64_t vector_floats = 0;
          for (const ShardRange& vector : unit_vectors(layout, step.unit))
            vector_floats += std::max<int64_t>(0, std::min(vector.end, own.end) - std::max(vector.begin, own.begin));
          const bool words = bf16 && gathers_bf16_words(step.unit);
          want[bf16] += static_cast<uint64_t>(words ? 2 * own.size() + 4 * vector_floats : 4 * own.size());
        }
    });
  }
  std::printf("[ bytes    ] ZeRO-3 forward gathers, rank 0 of 2: fp32 %llu, bf16 %llu (%.3f)\n",
              static_cast<unsigned long long>(sent[0]), static_cast<unsigned long long>(sent[1]),
              static_cast<double>(sent[1]) / static_cast<double>(sent[0]));
  EXPECT_GT(want[0], 0u);
  EXPECT_EQ(sent[0], want[0]);
  EXPECT_EQ(sent[1], want[1]);
  // The layers and the head at half, the embeddings (lookups) whole: below 1, above one half.
  EXPECT_LT(sent[1], sent[0]);
  EXPECT_GT(2 * sent[1], sent[0]);
}

TEST(WorkingCopy, AnFp32RunKeepsNone) {
  const model::ModelConfig config = model::preset("llama-tiny");
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  auto local = comm::make_local();
  ModelStates states(config, *backend, *local, RunSpec{}, 1);
  for (const StateSpec& spec : states.table()) EXPECT_NE(spec.id, StateBuf::weights_bf16) << spec.name;
  EXPECT_EQ(states.unit_weights_bf16(0), nullptr);
}

}  // namespace
}  // namespace fpdt::pipeline

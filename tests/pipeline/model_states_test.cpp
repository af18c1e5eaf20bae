// A bf16 run's working copy of the weights (pipeline/model_states.h): after initialisation, after each
// AdamW step and after a load (a resume), the bf16 words the GEMMs read are round_to_bf16 of the fp32
// masters, bit for bit, on every rank and stage — whole below stage 3, this rank's shards at 3. (That
// the stages then train alike, the gathered words included, is cli/zero_test's Bf16 test.)
#include <gtest/gtest.h>

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
      auto backend = kernels::make_backend("cpu");
      ZeroConfig zero;
      zero.stage = stage;
      zero.precision = kernels::Precision::bf16;
      ModelStates states(config, *backend, world, zero, seed);
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
    });
  }
}

TEST(WorkingCopy, AnFp32RunKeepsNone) {
  const model::ModelConfig config = model::preset("llama-tiny");
  auto backend = kernels::make_backend("cpu");
  auto local = comm::make_local();
  ModelStates states(config, *backend, *local, ZeroConfig{}, 1);
  for (const StateSpec& spec : states.table()) EXPECT_NE(spec.id, StateBuf::weights_bf16) << spec.name;
  EXPECT_EQ(states.unit_weights_bf16(0), nullptr);
}

}  // namespace
}  // namespace fpdt::pipeline

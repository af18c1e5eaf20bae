// Generation through the FPDT pipeline against transformers (tests/golden/*/generation.safetensors, made
// by tools/make_generation_golden.py): on the small HF test models, greedy decoding with the KV cache gives
// generate(do_sample=False)'s tokens one for one (fp32), on the reference and the cpu backend, resident,
// chunked and offloaded to RAM and disk, on one rank and on two sequence-parallel ranks — and on the
// cpu-guarded backend, whose compute tier the host cannot read (as a GPU's): no host code reads the cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/train/checkpoint.h"
#include "fpdt/train/sampler.h"
#include "model/generation_golden.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

struct Layout {
  const char* backend;
  int64_t chunk_tokens;  // the prompts are 1 to 150 tokens: 16 cuts the long ones into many chunks
  const char* offload;
  int ranks;
};

struct Case {
  std::string set;
  Layout layout;
  friend std::ostream& operator<<(std::ostream& out, const Case& c) {
    return out << c.set << " on " << c.layout.backend << ", chunks of " << c.layout.chunk_tokens << ", offload "
               << c.layout.offload << ", " << c.layout.ranks << " rank(s)";
  }
};

class GenerationGolden : public ::testing::TestWithParam<Case> {};

TEST_P(GenerationGolden, GreedyWithTheKvCacheGivesTransformersTokens) {
  const Case& c = GetParam();
  const testing::GenerationGolden golden(c.set);
  RunSpec run;
  run.backend = parse_backend(c.layout.backend);
  run.chunk_tokens = c.layout.chunk_tokens;
  run.offload = parse_offload(c.layout.offload);
  run.forward_only = true;
  train::SampleSettings greedy;  // no stop ids: transformers generated max_new_tokens each time
  greedy.greedy = true;
  greedy.new_tokens = golden.max_new_tokens;
  auto backend = kernels::make_backend(run.backend);
  // Each rank's answers (every rank must give the same).
  std::vector<std::vector<std::vector<int32_t>>> answers(static_cast<size_t>(c.layout.ranks));
  comm::run_ranks(c.layout.ranks, [&](comm::Communicator& comm) {
    FpdtModel model(golden.config, *backend, comm, run);
    train::load_weights(golden.dir, golden.config, model.states());  // through host memory: any backend
    Rng unused(1);
    for (const testing::GenerationPrompt& prompt : golden.prompts)
      answers[static_cast<size_t>(comm.rank())].push_back(train::generate(model, prompt.prompt, greedy, unused).tokens);
  });
  for (int rank = 1; rank < c.layout.ranks; ++rank) EXPECT_EQ(answers[static_cast<size_t>(rank)], answers[0]);
  ASSERT_EQ(answers[0].size(), golden.prompts.size());
  for (size_t p = 0; p < golden.prompts.size(); ++p)
    EXPECT_EQ(answers[0][p], golden.prompts[p].tokens)
        << "prompt " << p << " of " << golden.prompts[p].prompt.size() << " tokens";
}

INSTANTIATE_TEST_SUITE_P(
    Sets, GenerationGolden, ::testing::ValuesIn([] {
      std::vector<Case> cases;
      for (const std::string& set : testing::generation_sets())
        for (const Layout& layout : {Layout{"cpu", 4096, "none", 1}, Layout{"cpu", 16, "ram", 1},
                                     Layout{"cpu", 16, "disk:/tmp", 2}, Layout{"cpu", 8, "none", 2},
                                     Layout{"reference", 16, "ram", 1}, Layout{"cpu-guarded", 16, "disk:/tmp", 1}})
          cases.push_back({set, layout});
      return cases;
    }()),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Layout& l = info.param.layout;
      std::string offload = l.offload;
      std::string backend = l.backend;
      offload = offload.substr(0, offload.find(':'));
      std::replace(backend.begin(), backend.end(), '-', '_');
      return info.param.set + "_" + backend + "_C" + std::to_string(l.chunk_tokens) + "_" + offload + "_P" +
             std::to_string(l.ranks);
    });

}  // namespace
}  // namespace fpdt::pipeline

// The generation golden files (tools/make_generation_golden.py: transformers' greedy tokens, fp32) hold for
// fpdt's unchunked model: greedy decoding by whole-window forwards (the prompt and the tokens so far, argmax
// of the last position) gives transformers' tokens one for one, on the reference and the cpu backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/run_spec.h"
#include "generation_golden.h"
#include "testing.h"

namespace fpdt::model {
namespace {

struct Case {
  std::string set;
  std::string backend;
  friend std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.set << " on " << c.backend; }
};

struct TopTwo {
  int32_t token = 0;  // argmax (the first of equal maxima, as torch's)
  float margin = 0;   // top-1 − top-2
};

TopTwo top_two(const float* logits, int V) {
  const int32_t best = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  float second = -INFINITY;
  for (int v = 0; v < V; ++v)
    if (v != best) second = std::max(second, logits[v]);
  return {best, logits[best] - second};
}

class GenerationGolden : public ::testing::TestWithParam<Case> {};

TEST_P(GenerationGolden, WholeWindowGreedyGivesTransformersTokens) {
  const testing::GenerationGolden golden(GetParam().set);
  auto backend = kernels::make_backend(pipeline::parse_backend(GetParam().backend));
  Transformer model(golden.config, *backend);
  golden.load(model.layout(), model.params());
  const int V = golden.config.vocab_size;
  ASSERT_GE(golden.prompts.size(), 4u);
  double worst_first = 0.0, worst_margin = 0.0;  // the largest first-step logits error, margin change / scale
  for (size_t p = 0; p < golden.prompts.size(); ++p) {
    const testing::GenerationPrompt& want = golden.prompts[p];
    SCOPED_TRACE("prompt " + std::to_string(p) + " of " + std::to_string(want.prompt.size()) + " tokens");
    ASSERT_EQ(static_cast<int>(want.tokens.size()), golden.max_new_tokens);
    std::vector<int32_t> sequence = want.prompt, got;
    std::vector<float> logits;
    for (int step = 0; step < golden.max_new_tokens; ++step) {
      const int64_t T = static_cast<int64_t>(sequence.size());
      logits.resize(static_cast<size_t>(T) * V);
      model.forward(Batch{1, T, sequence.data(), nullptr}, logits.data());
      const float* last = logits.data() + (T - 1) * V;
      const TopTwo top = top_two(last, V);
      // Both sides' logits are within fp32_bound of each other norm-wise, so a margin moves by at most
      // 2·bound·‖l‖₂ = 2·bound·√V·scale (the tool's margin threshold rests on the same argument).
      const double bound = testing::fp32_bound(testing::transformer_reordering(golden.config, T, T, false));
      EXPECT_NEAR(top.margin, want.margins[step], 2.0 * bound * std::sqrt(double(V)) * want.scales[step])
          << "step " << step;
      worst_margin = std::max(worst_margin, std::abs(double{top.margin} - want.margins[step]) / want.scales[step]);
      if (step == 0) {
        const std::vector<float> first(last, last + V);
        const double error = testing::relative_error(first, want.first_logits);
        EXPECT_LE(error, bound);
        worst_first = std::max(worst_first, error);
      }
      got.push_back(top.token);
      sequence.push_back(top.token);  // greedy on fpdt's own tokens: a wrong one shows as a different tail
    }
    EXPECT_EQ(got, want.tokens);
  }
  std::printf("[ error    ] %s on %s: first-step logits %.2e, margins %.2e of the logits' rms (threshold %.0e)\n",
              GetParam().set.c_str(), GetParam().backend.c_str(), worst_first, worst_margin, golden.margin_threshold);
}

INSTANTIATE_TEST_SUITE_P(Sets, GenerationGolden,
                         ::testing::ValuesIn([] {
                           std::vector<Case> cases;
                           for (const std::string& set : testing::generation_sets())
                             for (const char* backend : {"reference", "cpu"}) cases.push_back({set, backend});
                           return cases;
                         }()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.set + "_" + info.param.backend; });

TEST(GenerationGoldenFiles, HoldWhatTheToolPromises) {
  // Every model folder has its file and the list above names it; each file's prompts are in the vocabulary,
  // fit a learned position table with their generation, and every margin clears the threshold.
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(testing::golden_dir("")))
    if (std::filesystem::exists(entry.path() / "generation.safetensors")) found.push_back(entry.path().filename());
  std::vector<std::string> listed = testing::generation_sets();
  std::sort(found.begin(), found.end());
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(found, listed);
  for (const std::string& set : testing::generation_sets()) {
    SCOPED_TRACE(set);
    const testing::GenerationGolden golden(set);
    EXPECT_GT(golden.margin_threshold, 0.0);
    EXPECT_GT(golden.max_new_tokens, 0);
    bool windowed_prompt = golden.config.sliding_window == 0;  // a windowed set has a prompt beyond its window
    for (const testing::GenerationPrompt& prompt : golden.prompts) {
      const int64_t length = static_cast<int64_t>(prompt.prompt.size() + prompt.tokens.size());
      if (golden.config.learned_positions()) {
        EXPECT_LE(length, golden.config.max_positions);
      }
      if (golden.config.sliding_window > 0 && static_cast<int64_t>(prompt.prompt.size()) > golden.config.sliding_window)
        windowed_prompt = true;
      for (const std::vector<int32_t>* ids : {&prompt.prompt, &prompt.tokens})
        for (const int32_t id : *ids) {
          EXPECT_TRUE(id >= 0 && id < golden.config.vocab_size) << id;
        }
      ASSERT_EQ(prompt.margins.size(), prompt.tokens.size());
      ASSERT_EQ(prompt.scales.size(), prompt.tokens.size());
      EXPECT_EQ(prompt.first_logits.size(), static_cast<size_t>(golden.config.vocab_size));
      for (size_t step = 0; step < prompt.margins.size(); ++step)
        EXPECT_GE(prompt.margins[step], golden.margin_threshold * prompt.scales[step]) << "step " << step;
    }
    EXPECT_TRUE(windowed_prompt);
  }
}

}  // namespace
}  // namespace fpdt::model

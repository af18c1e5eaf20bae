// Hugging Face models in, exactly: each golden set of tools/make_hf_golden.py (transformers 5.24
// models saved with save_pretrained: untied and tied Llama, Qwen2 with biases and a window on one
// layer, Mistral with a window, llama3 and yarn RoPE scaling, GPT-2 with both scaling flags; sharded,
// F16 and prefix-less files) loaded as `--init-from` loads it gives transformers' float32 logits and
// loss, on the unchunked model with the fast and the reference backend.
#include <gtest/gtest.h>

#include <cstring>

#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/run_spec.h"
#include "hf_golden.h"
#include "testing.h"

namespace fpdt::model {
namespace {

struct Case {
  std::string set;
  std::string backend;
  friend std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.set << " on " << c.backend; }
};

class HfGolden : public ::testing::TestWithParam<Case> {};

TEST_P(HfGolden, LogitsAndLossEqualTransformers) {
  const testing::GoldenSet golden(GetParam().set);
  auto backend = kernels::make_backend(pipeline::parse_backend(GetParam().backend));
  Transformer model(golden.config, *backend);
  golden.load(model.layout(), model.params());
  std::vector<float> logits(golden.logits.size());
  const LossStats stats = model.forward(golden.batch, logits.data());
  // Against transformers' fp32 on the same weights: the same maths, each side rounding in its own order.
  // (Each feature a set exists for moves these logits by > 1e-3: the tool checks it.)
  const int64_t tokens = golden.batch.B * golden.batch.T;
  const double logits_bound = testing::fp32_bound(testing::transformer_reordering(golden.config, tokens, golden.batch.T, false));
  const double loss_bound =
      testing::fp32_bound(testing::transformer_loss_reordering(golden.config, tokens, golden.batch.T, stats.count));
  const double logits_error = testing::relative_error(logits, golden.logits);
  const double loss_error = std::abs(stats.mean() - golden.loss) / golden.loss;
  EXPECT_LE(logits_error, logits_bound);
  EXPECT_LE(loss_error, loss_bound);
  std::printf("[ error    ] %s on %s: logits %.2e (bound %.2e), loss %.2e (bound %.2e)\n", GetParam().set.c_str(),
              GetParam().backend.c_str(), logits_error, logits_bound, loss_error, loss_bound);
}

INSTANTIATE_TEST_SUITE_P(Sets, HfGolden,
                         ::testing::ValuesIn([] {
                           std::vector<Case> cases;
                           for (const char* set : {"llama", "llama_tied", "qwen2", "mistral", "llama3", "yarn", "gpt2"})
                             for (const char* backend : {"cpu", "reference"}) cases.push_back({set, backend});
                           return cases;
                         }()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.set + "_" + info.param.backend; });

TEST(HfGoldenVariants, ShardedF16AndPrefixlessFilesLoadTheSameWeights) {
  // llama_tied/variant is the same model as transformers writes its base model (no "model."
  // prefix), in F16, in shards; the weights were chosen so that BF16 and F16 hold them exactly, so
  // both folders must give bitwise the same fp32 parameters.
  const testing::GoldenSet golden("llama_tied");
  const ParameterLayout layout(golden.config);
  ParameterBlock canonical(layout, "canonical"), variant(layout, "variant");
  golden.load(layout, canonical);
  const HfCheckpoint variant_files(golden.dir + "/variant");
  EXPECT_GT(variant_files.files().size(), 1u) << "the variant should be sharded";
  SafetensorsReader first_shard(variant_files.files()[0]);
  EXPECT_EQ(first_shard.entry(first_shard.names()[0]).dtype, DType::f16);
  EXPECT_FALSE(first_shard.names()[0].starts_with("model.")) << first_shard.names()[0];
  variant_files.load(golden.config, layout, variant);
  EXPECT_EQ(0, std::memcmp(canonical.data(), variant.data(), sizeof(float) * static_cast<size_t>(layout.total_numel())));
  // And the sets whose only copy is a variant say so (their logits are checked above).
  EXPECT_GT(HfCheckpoint(testing::golden_dir("llama")).files().size(), 1u);
  SafetensorsReader mistral(testing::golden_dir("mistral") + "/model.safetensors");
  EXPECT_EQ(mistral.entry("model.embed_tokens.weight").dtype, DType::f16);
  EXPECT_TRUE(SafetensorsReader(testing::golden_dir("gpt2") + "/model.safetensors").contains("wte.weight"));
}

}  // namespace
}  // namespace fpdt::model

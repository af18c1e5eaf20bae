// Tests of `fpdt extend` recipes (train/recipe.h, train/auto_layout.h): a recipe resolves into complete
// stages (RoPE and optimizer carried, seeds per stage, the batch from batch_tokens, the gates over their
// defaults); a malformed one gets one error naming the file, the line and the field, an unknown field
// the known ones; an edit of a started stage is refused naming the field; `layout: auto` picks, among
// the layouts the planner considered, the fastest within the budget, and that layout fits the budget
// on a dry run.
#include "fpdt/train/recipe.h"

#include <filesystem>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/data/shard.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/train/auto_layout.h"
#include "fpdt/train/trainer.h"
#include "testing.h"

namespace fpdt::train {
namespace {

using testing::error_message;
using testing::expect_contains;
using testing::TempDir;

// A base model folder (config.json: a tiny Llama of context 256) and byte-token shards.
struct RecipeSetup {
  TempDir dir;
  std::string model, data;
  RecipeSetup() {
    model = dir.file("base");
    data = dir.file("data");
    std::filesystem::create_directories(model);
    std::filesystem::create_directories(data);
    testing::write_text_file(model + "/config.json", R"({"model_type": "llama", "vocab_size": 257, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})");
    Rng rng(testing::fresh_seed());
    std::vector<int32_t> tokens(5000);
    for (int32_t& token : tokens) token = static_cast<int32_t>(rng.below(256));
    data::write_shard(data + "/train.bin", tokens, 257);
    data::write_shard(data + "/val.bin", tokens, 257);
  }
  // The recipe text with its model and data lines, written to recipe.yaml; returns its path.
  std::string write(const std::string& body) const {
    const std::string path = dir.file("recipe.yaml");
    testing::write_text_file(path, "model: " + model + "\ndata: " + data + "\nout: " + dir.file("run") + "\n" + body);
    return path;
  }
};

TEST(Recipe, StagesResolveWithTheirCarriedSettings) {
  const RecipeSetup setup;
  const Recipe recipe = load_recipe(setup.write(R"(train: {lr: 1e-3, batch: 2, threads: 1}
gates:
  short_loss: {sequences: 3, max_regression: 0.5}
stages:
  - name: a
    seq: 256
    steps: 4
  - name: b
    seq: 512
    steps: 3
    rope: {type: yarn, factor: 2}
    batch_tokens: 2K
    gates:
      short_loss: {policy: warn}
      position_loss: {max_excess: 0.1}
  - name: c
    seq: 1K
    steps: 2
    rope: {theta: 5e5}
    optimizer: fresh
    lr: 5e-4
)"));
  ASSERT_EQ(recipe.stages.size(), 3u);
  EXPECT_EQ(recipe.base_seq, 256);  // the config's context
  const RecipeStage &a = recipe.stages[0], &b = recipe.stages[1], &c = recipe.stages[2];
  EXPECT_EQ(a.train.init_from, setup.model);
  EXPECT_EQ(b.train.init_from, stage_dir(recipe, 0) + "/step_4");
  EXPECT_EQ(c.train.init_from, stage_dir(recipe, 1) + "/step_3");
  EXPECT_FALSE(a.train.init_optimizer);
  EXPECT_TRUE(b.train.init_optimizer);  // carry is the default after the first stage
  EXPECT_FALSE(c.train.init_optimizer);
  EXPECT_EQ(a.train.seed + 1, b.train.seed);  // each stage its own data order
  EXPECT_EQ(b.train.grad_accum, 2);           // 2K tokens = 2 micro-batches of 2 x 512
  EXPECT_EQ(a.train.optimizer.lr, 1e-3);
  EXPECT_EQ(c.train.optimizer.lr, 5e-4);
  EXPECT_TRUE(a.train.rope_scaling.empty());
  expect_contains(b.train.rope_scaling, {"\"yarn\"", "\"factor\":2", "\"original_max_position_embeddings\":256"});
  EXPECT_EQ(c.train.rope_scaling, b.train.rope_scaling);  // carried
  ASSERT_TRUE(c.train.rope_theta.has_value());
  EXPECT_EQ(*c.train.rope_theta, 5e5);
  EXPECT_TRUE(a.gates.short_loss.on);
  EXPECT_EQ(a.gates.short_loss.sequences, 3);
  EXPECT_EQ(b.gates.short_loss.sequences, 3);  // the default's fields, its policy its own
  EXPECT_EQ(b.gates.short_loss.policy, GatePolicy::warn);
  EXPECT_FALSE(a.gates.position_loss.on);
  EXPECT_TRUE(b.gates.position_loss.on);
  EXPECT_EQ(b.gates.position_loss.max_excess, 0.1);
  const nlohmann::ordered_json resolved = resolved_json(recipe);
  EXPECT_EQ(resolved["stages"][1]["train"]["grad-accum"], 2);
  EXPECT_EQ(resolved["stages"][2]["optimizer"], "fresh");
}

TEST(Recipe, MalformedRecipesNameTheFileLineAndField) {
  const RecipeSetup setup;
  struct Case {
    std::string body;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"stages:\n  - seq: 256\n    steps: [1\n", {"recipe.yaml:", "not YAML"}},
      {"stage:\n  - seq: 256\n", {"recipe.yaml:4: stage: unknown field", "the known fields here: model, data, out"}},
      {"stages:\n  - seq: 256\n    steps: 2\n    lr: -1\n", {"recipe.yaml:7: stages[0].lr", "--lr must be"}},
      {"stages:\n  - seq: 256\n    stepz: 2\n", {"recipe.yaml:6: stages[0].stepz: unknown field", "a stage's fields: name",
                                                  "batch_tokens", "steps", "lr"}},
      {"stages:\n  - seq: 256\n    init-from: x\n", {"recipe.yaml:6: stages[0].init-from: is the recipe's own"}},
      {"stages:\n  - seq: 256\n    rope-theta: 5\n", {"stages[0].rope-theta", "rope: {theta: T}"}},
      {"stages:\n  - seq: 256\n    optimizer: carry\n", {"recipe.yaml:6: stages[0].optimizer", "first stage"}},
      {"stages:\n  - seq: 256\n    batch: 1\n    batch_tokens: 300\n", {"recipe.yaml:7: stages[0].batch_tokens", "multiple of 256"}},
      {"stages:\n  - seq: 256\n    rope: {type: ntk, factor: 2}\n", {"stages[0].rope.type", "'ntk'"}},
      {"stages:\n  - seq: 256\n    gates: {ruler: {min_score: high}}\n", {"stages[0].gates.ruler.min_score", "'high' is not a number"}},
      {"stages:\n  - seq: 256\n    gates: {perplexity: {}}\n", {"stages[0].gates.perplexity: unknown field", "position_loss, short_loss, ruler"}},
      {"gates: {short_loss: {policy: maybe}}\nstages:\n  - seq: 256\n", {"recipe.yaml:4: gates.short_loss.policy", "stop", "warn"}},
      {"stages:\n  - seq: 256\n    layout: auto\n    chunk-tokens: 64\n", {"stages[0].layout", "auto chooses chunk-tokens"}},
      {"stages:\n  - name: x\n    seq: 256\n  - name: x\n    seq: 256\n", {"stages[1].name", "repeated"}},
      {"stages: []\n", {"recipe.yaml:4: stages: is not a list of stages"}},
      {"budget: {compute: lots}\nstages:\n  - seq: 256\n", {"recipe.yaml:4: budget.compute", "'lots' is not a number"}},
      {"mixture:\n  - {data: /nonexistent, weight: 1}\nstages:\n  - seq: 256\n", {"recipe.yaml:5: mixture[0].data", "no train.bin"}},
  };
  for (const Case& c : cases) {
    const std::string path = setup.write(c.body);
    const std::string message = error_message([&] { load_recipe(path); });
    for (const std::string& part : c.parts) EXPECT_NE(message.find(part), std::string::npos) << c.body << "\n-> " << message;
    EXPECT_EQ(message.find("[internal]"), std::string::npos) << message;
  }
  expect_contains(error_message([&] { load_recipe(setup.dir.file("missing.yaml")); }), {"cannot read the recipe"});
}

TEST(Recipe, EditsOfStartedStagesAreRefusedNamingTheField) {
  const RecipeSetup setup;
  const std::string stages = "stages:\n  - {name: a, seq: 256, steps: 2}\n  - {name: b, seq: 512, steps: 2}\n";
  const nlohmann::ordered_json saved = resolved_json(load_recipe(setup.write(stages)));
  const nlohmann::ordered_json lr = resolved_json(load_recipe(setup.write(
      "stages:\n  - {name: a, seq: 256, steps: 2, lr: 2e-3}\n  - {name: b, seq: 512, steps: 2, lr: 2e-3}\n")));
  // Stage a has started: its lr may not change; b's may.
  expect_contains(error_message([&] { check_recipe_edit(saved, lr, 1); }), {"edited after its run started", "stage 1: lr"});
  const std::vector<std::string> accepted = check_recipe_edit(saved, lr, 0);
  ASSERT_EQ(accepted.size(), 2u);
  expect_contains(accepted[1], {"stage 2: lr"});
  // A stage's gates may change after it started.
  const nlohmann::ordered_json gates = resolved_json(load_recipe(setup.write(
      "gates: {short_loss: {}}\nstages:\n  - {name: a, seq: 256, steps: 2}\n  - {name: b, seq: 512, steps: 2}\n")));
  EXPECT_NO_THROW(check_recipe_edit(saved, gates, 2));
  EXPECT_TRUE(check_recipe_edit(saved, saved, 2).empty());
}

// The compute peak of a dry run of `settings` (its model from init_from's config.json).
size_t dry_run_compute_peak(TrainSettings settings) {
  settings.dry_run = true;
  settings.init_optimizer = false;
  settings.peak_gflops = 10;
  MemoryTiers::instance().reset_peak(Tier::compute);
  MemoryTiers::instance().reset_peak(Tier::offload);
  const std::unique_ptr<comm::Communicator> world = comm::make_local();
  ::testing::internal::CaptureStdout();  // the start-up table
  const TrainResult result = train(settings, *world);
  ::testing::internal::GetCapturedStdout();
  return result.compute_peak_bytes;
}

TEST(Recipe, AutoLayoutIsTheFastestWithinTheBudgetAndFitsItOnADryRun) {
  const RecipeSetup setup;
  const model::ModelConfig config = model::load_hf_config(setup.model + "/config.json");
  // The budget: between the smallest compute peak of any layout and the fastest layout's, so that it binds.
  TrainSettings probe;
  probe.run.seq_tokens = 4096;
  probe.run.batch_size = 1;
  const LayoutChoice free = choose_layout("recipe", config, probe.run, {});
  double least = free.considered[0].compute_bytes;
  for (const LayoutCandidate& candidate : free.considered) least = std::min(least, candidate.compute_bytes);
  const double fastest = free.considered[free.chosen].compute_bytes;
  ASSERT_GT(fastest, least * 1.5) << "the fastest layout is about the smallest: no budget between them to test";
  const int64_t budget = static_cast<int64_t>((least + fastest) / 2);
  const Recipe recipe = load_recipe(setup.write("budget: {compute: " + std::to_string(budget) +
                                                "}\ntrain: {threads: 1, batch: 1}\nstages:\n  - {seq: 4K, steps: 1, layout: auto}\n"));
  const RecipeStage& stage = recipe.stages[0];
  ASSERT_TRUE(stage.auto_layout);
  const LayoutChoice choice = choose_layout("recipe", config, stage.train.run, {budget, 0, 0});
  const LayoutCandidate& chosen = choice.considered[choice.chosen];
  EXPECT_EQ(describe_layout(chosen.run), describe_layout(stage.train.run));
  EXPECT_EQ(stage.train.run.compute_mem_bytes, budget);  // the trainer enforces it
  for (const LayoutCandidate& candidate : choice.considered) {
    if (candidate.within_budget) {
      EXPECT_GE(candidate.step_seconds, chosen.step_seconds) << describe_layout(candidate.run);
    }
  }
  // The budget binds: the layout chosen without it is over it (the cost model ties layouts whose copies it
  // hides; among equals the first is kept: the largest chunk, the least offload).
  EXPECT_NE(describe_layout(chosen.run), describe_layout(free.run()));
  EXPECT_GT(choice.considered.size(), 10u);
  const size_t peak = dry_run_compute_peak(stage.train);
  EXPECT_LE(peak, static_cast<size_t>(budget)) << describe_layout(stage.train.run);
  // The planner's peak is the dry run's (plan/agreement_test: equal by construction).
  EXPECT_EQ(static_cast<double>(peak), chosen.compute_bytes);
  // A budget nothing fits is refused, naming it.
  expect_contains(error_message([&] {
                    load_recipe(setup.write("budget: {compute: 1000}\nstages:\n  - {seq: 4K, steps: 1, layout: auto}\n"));
                  }),
                  {"recipe.yaml:6: stages[0].layout", "no layout of S 4096 fits the budget"});
}

}  // namespace
}  // namespace fpdt::train

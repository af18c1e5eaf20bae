// ZeRO over thread ranks (pipeline/model_states.h): after 5 AdamW steps, stages 1, 2 and 3 — and the
// optimizer offloaded — end at stage 0's weights and losses, bitwise, at sp ∈ {1, 2} × dp ∈ {1, 2},
// for a GQA Llama (untied) and a GPT (tied embeddings, learned positions, biases): every stage sums the
// same gradients in the same rank order and the norm in the same block order. With gradient
// accumulation stages 2 and 3 sum each micro-batch over the ranks before adding the micro-batches, so
// they are within 1e-6 relative, and stage 1 is still bitwise. A run saved at one world size and stage
// resumes at another (the optimizer state resharded) as if never stopped, within 1e-6. In bf16 (the
// weights' bf16 working copy, ZeRO-3 gathering its words and the fp32 vectors) the same, bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/train/trainer.h"
#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

struct ZeroRun {
  std::vector<float> weights;  // final model.safetensors, all tensors concatenated
  std::vector<double> losses;  // per step
  std::vector<double> norms;   // gradient norm per step
};

// A GPT-2 over the byte tokenizer: tied embeddings, a learned position table, biases everywhere.
std::string write_gpt_config(const TempDir& dir) {
  const std::string path = dir.file("gpt.json");
  write_text_file(path, R"({"model_type": "gpt2", "vocab_size": 257, "n_embd": 32, "n_layer": 2, "n_head": 4,
    "n_positions": 64, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "tie_word_embeddings": true})");
  return path;
}

ZeroRun train_zero(const TinySetup& setup, const std::string& model, const std::string& out, int sp, int dp,
                   int zero, bool offload = false, int64_t grad_accum = 1,
                   pipeline::Precision precision = pipeline::Precision::fp32) {
  train::TrainSettings s = setup.settings(out, 5, sp, dp);
  s.run.model = model;
  s.grad_accum = grad_accum;
  s.optimizer.grad_clip = 0.05;  // small enough to clip: the clip coefficient comes from the norm
  s.run.zero = zero;
  s.run.offload_optimizer = offload;
  s.run.precision = precision;
  comm::run_ranks(sp * dp, [&](comm::Communicator& world) { train::train(s, world); });
  ZeroRun run;
  run.weights = checkpoint_weights(out + "/step_5");
  for (const nlohmann::json& line : metrics_lines(out + "/metrics.jsonl")) {
    run.losses.push_back(line.at("loss").get<double>());
    run.norms.push_back(line.at("grad_norm").get<double>());
  }
  return run;
}

void expect_bitwise(const ZeroRun& got, const ZeroRun& want, const std::string& what) {
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  EXPECT_EQ(std::memcmp(got.weights.data(), want.weights.data(), want.weights.size() * sizeof(float)), 0)
      << what << ": weights differ (relative " << relative_error(got.weights, want.weights) << ")";
  EXPECT_EQ(got.losses, want.losses) << what;
  EXPECT_EQ(got.norms, want.norms) << what;
}

TEST(Zero, StagesOneToThreeEndBitwiseAtStageZero) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());  // Llama: 4 heads, 2 kv heads
  const std::string models[] = {setup.config_path, write_gpt_config(dir)};
  for (size_t m = 0; m < 2; ++m)
    for (const auto& [sp, dp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}, {2, 2}}) {
      const std::string tag = (m == 0 ? "llama" : "gpt") + std::string(" sp ") + std::to_string(sp) + " dp " +
                              std::to_string(dp);
      const std::string name = std::to_string(m) + "_" + std::to_string(sp) + "x" + std::to_string(dp);
      const ZeroRun zero0 = train_zero(setup, models[m], dir.file(name + "_z0"), sp, dp, 0);
      ASSERT_EQ(zero0.losses.size(), 5u);
      for (int stage : {1, 2, 3})
        expect_bitwise(train_zero(setup, models[m], dir.file(name + "_z" + std::to_string(stage)), sp, dp, stage),
                       zero0, tag + " ZeRO " + std::to_string(stage));
      if (sp * dp == 4)
        for (int stage : {2, 3})
          expect_bitwise(
              train_zero(setup, models[m], dir.file(name + "_o" + std::to_string(stage)), sp, dp, stage, true), zero0,
              tag + " ZeRO " + std::to_string(stage) + " with the optimizer offloaded");
    }
}

// bf16: every stage's GEMMs read round_to_bf16 of the same masters — stage 3 its gathered words, with
// the norm weights and biases gathered in fp32 beside them — so the runs end at stage 0's bits too.
TEST(Zero, Bf16StagesOneToThreeEndBitwiseAtStageZero) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const std::string models[] = {setup.config_path, write_gpt_config(dir)};
  const pipeline::Precision bf16 = pipeline::Precision::bf16;
  for (size_t m = 0; m < 2; ++m)
    for (const auto& [sp, dp] : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {2, 2}}) {
      const std::string tag = (m == 0 ? "llama" : "gpt") + std::string(" bf16 sp ") + std::to_string(sp) + " dp " +
                              std::to_string(dp);
      const std::string name = "bf16_" + std::to_string(m) + "_" + std::to_string(sp) + "x" + std::to_string(dp);
      const ZeroRun zero0 = train_zero(setup, models[m], dir.file(name + "_z0"), sp, dp, 0, false, 1, bf16);
      ASSERT_EQ(zero0.losses.size(), 5u);
      for (int stage : {1, 2, 3})
        expect_bitwise(
            train_zero(setup, models[m], dir.file(name + "_z" + std::to_string(stage)), sp, dp, stage, false, 1, bf16),
            zero0, tag + " ZeRO " + std::to_string(stage));
      if (sp * dp == 4)
        for (int stage : {2, 3})
          expect_bitwise(train_zero(setup, models[m], dir.file(name + "_o" + std::to_string(stage)), sp, dp, stage,
                                    true, 1, bf16),
                         zero0, tag + " ZeRO " + std::to_string(stage) + " with the optimizer offloaded");
    }
}

// A bf16 run stopped after 5 steps and resumed (the working copy re-made from the loaded masters) goes
// on as the run that never stopped, bitwise: at stage 0, and at stage 3 with the optimizer offloaded.
TEST(Zero, Bf16ResumesBitwise) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  for (const auto& [zero, offload] : std::vector<std::pair<int, bool>>{{0, false}, {3, true}}) {
    const std::string name = "z" + std::to_string(zero) + (offload ? "o" : "");
    auto settings = [&, zero = zero, offload = offload](const std::string& out) {  // clang < 16: no binding captures
      train::TrainSettings s = setup.settings(out, 10, 2, 1);
      s.save_every = 5;
      s.eval_batches = 0;
      s.run.zero = zero;
      s.run.offload_optimizer = offload;
      s.run.precision = pipeline::Precision::bf16;
      return s;
    };
    auto losses = [](const train::TrainSettings& s) {
      comm::run_ranks(s.run.sp * s.run.dp, [&](comm::Communicator& world) { train::train(s, world); });
      std::vector<double> values;
      for (const nlohmann::json& line : metrics_lines(s.out_dir + "/metrics.jsonl")) values.push_back(line.at("loss"));
      return values;
    };
    const std::vector<double> want = losses(settings(dir.file(name + "_straight")));
    train::TrainSettings first = settings(dir.file(name + "_resumed"));
    first.stop_after_steps = 5;
    losses(first);
    train::TrainSettings second = settings(dir.file(name + "_resumed"));
    second.resume = true;
    const std::vector<double> got = losses(second);
    ASSERT_EQ(want.size(), 10u) << name;
    EXPECT_EQ(got, want) << "bf16 ZeRO " << zero << (offload ? " offloaded" : "") << ": resumed losses differ";
  }
}

TEST(Zero, GradientAccumulationIsWithinRoundingOfStageZero) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  for (const std::string& model : {setup.config_path, write_gpt_config(dir)}) {
    const std::string tag = model == setup.config_path ? "llama" : "gpt";
    const ZeroRun zero0 = train_zero(setup, model, dir.file(tag + "_z0"), 2, 2, 0, false, 2);
    expect_bitwise(train_zero(setup, model, dir.file(tag + "_z1"), 2, 2, 1, false, 2), zero0, tag + " ZeRO 1");
    for (int stage : {2, 3}) {
      const ZeroRun run = train_zero(setup, model, dir.file(tag + "_z" + std::to_string(stage)), 2, 2, stage, false, 2);
      // Each micro-batch's gradient summed over ranks, then the two added, against each rank's two added,
      // then summed: fp32 rounding of another order, through 5 AdamW steps at lr 1e-3 (TinySetup's
      // reason): 1e-6 relative, the issue's bar.
      const double error = relative_error(run.weights, zero0.weights);
      std::printf("[ error    ] %s ZeRO %d, 2 micro-batches: weights after 5 steps %.2e\n", tag.c_str(), stage, error);
      EXPECT_LE(error, 1e-6) << tag << " ZeRO " << stage;
      for (size_t step = 0; step < zero0.losses.size(); ++step)
        EXPECT_NEAR(run.losses[step], zero0.losses[step], 1e-6 * zero0.losses[step]) << tag << " step " << step + 1;
    }
  }
}

// The offloaded update overlaps the next step, so its non-finite weights are found once that step's
// passes are done: the run still stops with the step that made them, and saves nothing of them.
TEST(Zero, AnOffloadedUpdateThatBreaksTheWeightsStopsTheRun) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  train::TrainSettings s = setup.settings(dir.file("run"), 6, 2, 1);
  s.save_every = 2;
  s.eval_batches = 0;
  s.run.zero = 3;
  s.run.offload_optimizer = true;
  s.fault.lr_inf_from_step = 3;
  const std::string message =
      error_message([&] { comm::run_ranks(2, [&](comm::Communicator& world) { train::train(s, world); }); });
  expect_contains(message, {"[train]", "step 3's update made the weights non-finite"});
  EXPECT_EQ(file_bytes(s.out_dir + "/latest"), "step_2\n");
  EXPECT_FALSE(std::filesystem::exists(s.out_dir + "/step_4"));
}

// A run of 10 steps, checkpoints every 5; with stop_after 5 it ends after the first checkpoint.
train::TrainSettings ten_steps(const TinySetup& setup, const std::string& out, int sp, int dp, int zero,
                               int64_t grad_accum = 1) {
  train::TrainSettings s = setup.settings(out, 10, sp, dp);
  s.save_every = 5;
  s.eval_batches = 0;
  s.grad_accum = grad_accum;
  s.run.zero = zero;
  return s;
}

std::vector<double> losses_of(const train::TrainSettings& s) {
  comm::run_ranks(s.run.sp * s.run.dp, [&](comm::Communicator& world) { train::train(s, world); });
  std::vector<double> losses;
  for (const nlohmann::json& line : metrics_lines(s.out_dir + "/metrics.jsonl")) losses.push_back(line.at("loss"));
  return losses;
}

// Saved at one world size and ZeRO stage, resumed at another with the same global batch: the optimizer
// state is resharded (each rank reads its share from the shards that hold it), so the next 5 losses are
// the uninterrupted run's, up to the rounding of another summation order (other ranks, another
// accumulation): 1e-6 relative, the issue's bar.
TEST(Zero, ResumesAtAnotherWorldSizeAndStage) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  struct Case {
    int sp, dp, zero, accum;  // of the run that saves
    int resume_sp, resume_dp, resume_zero, resume_accum;
  };
  const Case cases[] = {{2, 1, 3, 1, 4, 1, 1, 1}, {2, 1, 3, 1, 1, 1, 0, 1}, {1, 2, 2, 1, 1, 1, 3, 2}};
  std::map<std::string, std::vector<double>> straight;  // the uninterrupted runs' losses
  for (const Case& c : cases) {
    const std::string name = std::to_string(c.sp) + "x" + std::to_string(c.dp) + "z" + std::to_string(c.zero);
    const std::string tag = "sp " + std::to_string(c.sp) + " dp " + std::to_string(c.dp) + " ZeRO " +
                            std::to_string(c.zero) + " -> sp " + std::to_string(c.resume_sp) + " dp " +
                            std::to_string(c.resume_dp) + " ZeRO " + std::to_string(c.resume_zero) + " accum " +
                            std::to_string(c.resume_accum);
    if (!straight.count(name)) straight[name] = losses_of(ten_steps(setup, dir.file(name), c.sp, c.dp, c.zero, c.accum));
    const std::vector<double>& want = straight[name];
    const std::string resumed = dir.file("resumed_" + name + "_" + std::to_string(c.resume_sp) +
                                         std::to_string(c.resume_dp) + std::to_string(c.resume_zero));
    train::TrainSettings first = ten_steps(setup, resumed, c.sp, c.dp, c.zero, c.accum);
    first.stop_after_steps = 5;
    losses_of(first);
    train::TrainSettings second =
        ten_steps(setup, resumed, c.resume_sp, c.resume_dp, c.resume_zero, c.resume_accum);
    second.resume = true;
    const std::vector<double> got = losses_of(second);
    ASSERT_EQ(got.size(), 10u) << tag;
    ASSERT_EQ(want.size(), 10u) << tag;
    for (size_t step = 0; step < 5; ++step) EXPECT_EQ(got[step], want[step]) << tag << " step " << step + 1;
    for (size_t step = 5; step < 10; ++step) {
      std::printf("[ error    ] %s, step %zu: loss %.8f vs %.8f (relative %.1e)\n", tag.c_str(), step + 1, got[step],
                  want[step], std::abs(got[step] - want[step]) / want[step]);
      EXPECT_NEAR(got[step], want[step], 1e-6 * want[step]) << tag << " step " << step + 1;
    }
  }
}

}  // namespace
}  // namespace fpdt::testing

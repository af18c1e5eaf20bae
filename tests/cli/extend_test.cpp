// `fpdt extend RECIPE` end to end: a recipe of three tiny stages (a tiny Llama of context 256, byte data,
// S 256 → 512 → 1K) runs; the stage boundaries carry the weights and the optimizer state as the recipe
// says; RoPE θ and scaling change per stage; the gates run (RULER among them) and a failing gate of policy
// stop ends the run with its figures; a kill at random points and --resume reach the final weights of an
// uninterrupted run bitwise; an edited recipe and a malformed one are refused with one clear error.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/extend_recipe.h"

namespace fpdt::testing {
namespace {

TEST(Extend, ThreeStagesCarryWhatTheRecipeSaysAndTheirGatesRun) {
  const ExtendSetup setup;
  const std::string out = setup.dir.file("run");
  const ProgramResult dry = run_fpdt("extend " + setup.recipe("r", out, kGates) + " --dry-run", 300);
  ASSERT_EQ(dry.exit_status, 0) << dry.output;
  expect_contains(dry.output, {"dry run of", "s256", "s512", "C 512", "(auto)", "s1k", "offload disk"});
  EXPECT_FALSE(std::filesystem::exists(out)) << "a dry run trains nothing and writes no run folder";

  const ProgramResult result = run_fpdt("extend " + setup.recipe("r", out, kGates), 600);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  const std::string s1 = stage(out, 1, "s256") + "/step_3", s2 = stage(out, 2, "s512") + "/step_3",
                    s3 = stage(out, 3, "s1k") + "/step_2";
  // Optimizer: stage 2 carries stage 1's (3 + 3 updates); stage 3 starts fresh (its own 2).
  EXPECT_EQ(optimizer_updates(s1), 3);
  EXPECT_EQ(optimizer_updates(s2), 6);
  EXPECT_EQ(optimizer_updates(s3), 2);
  // RoPE per stage, as each stage's checkpoint records it: the base's θ, then YaRN x2, then θ 40000 with it.
  const nlohmann::json c1 = nlohmann::json::parse(file_bytes(s1 + "/config.json"));
  const nlohmann::json c2 = nlohmann::json::parse(file_bytes(s2 + "/config.json"));
  const nlohmann::json c3 = nlohmann::json::parse(file_bytes(s3 + "/config.json"));
  EXPECT_EQ(c1["rope_theta"], 10000.0);
  EXPECT_TRUE(!c1.contains("rope_scaling") || c1["rope_scaling"].is_null()) << c1.dump();
  EXPECT_EQ(c2["rope_scaling"]["rope_type"], "yarn");
  EXPECT_EQ(c2["rope_scaling"]["factor"], 2.0);
  EXPECT_EQ(c3["rope_theta"], 40000.0);
  EXPECT_EQ(c3["rope_scaling"]["rope_type"], "yarn");
  // Weights: each stage starts from the previous one's last checkpoint.
  expect_contains(result.output, {"weights from " + s1, "optimizer state from " + s1 + ": 3 AdamW updates",
                                  "weights from " + s2});
  // Gates: two after each stage, RULER too after the last; the report has every stage.
  const nlohmann::json gates = nlohmann::json::parse(file_bytes(stage(out, 3, "s1k") + "/gates.json"));
  ASSERT_EQ(gates["gates"].size(), 3u) << gates.dump();
  EXPECT_EQ(gates["gates"][2]["gate"], "ruler");
  const nlohmann::json report = nlohmann::json::parse(file_bytes(out + "/report.json"));
  ASSERT_EQ(report["stages"].size(), 3u);
  EXPECT_EQ(report["stages"][1]["loss_by_step"].size(), 3u);
  EXPECT_EQ(report["stages"][1]["gates"].size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(out + "/summary.txt"));
  EXPECT_TRUE(std::filesystem::exists(out + "/recipe.resolved.json"));

  // The run folder is the recipe's: a fresh start into it is refused, --resume of the finished run trains
  // nothing, and an edit of a stage that has started is refused naming the field.
  expect_one_clear_error(run_fpdt("extend " + setup.recipe("r", out, kGates), 300), {"holds a run", "--resume"});
  const ProgramResult again = run_fpdt("extend " + setup.recipe("r", out, kGates) + " --resume", 300);
  EXPECT_EQ(again.exit_status, 0) << again.output;
  EXPECT_EQ(again.output.find("step     1/"), std::string::npos) << again.output;
  std::string edited = file_bytes(setup.recipe("r", out, kGates));
  edited.replace(edited.find("lr: 1e-3"), 8, "lr: 2e-3");
  write_text_file(setup.dir.file("edited.yaml"), edited);
  expect_one_clear_error(run_fpdt("extend " + setup.dir.file("edited.yaml") + " --resume", 300),
                         {"edited after its run started", "stage 1: lr"});
}

TEST(Extend, FailingGateStopsTheRunWithItsFigures) {
  const ExtendSetup setup;
  const std::string out = setup.dir.file("run");
  const std::string strict = "gates:\n  short_loss: {sequences: 2, max_regression: -100, policy: stop}";
  const ProgramResult stopped = run_fpdt("extend " + setup.recipe("strict", out, strict), 600);
  EXPECT_EQ(stopped.exit_status, 3) << stopped.output;
  expect_contains(stopped.output, {"gate short_loss after stage s256", "<= -100.000): FAILED, the run stops",
                                   "a gate of policy stop failed after stage s256"});
  EXPECT_FALSE(std::filesystem::exists(stage(out, 2, "s512"))) << "the next stage started after a failed gate";
  // A resume meets the same verdict (the gate is not run again: same rule, same weights).
  const ProgramResult still = run_fpdt("extend " + setup.recipe("strict", out, strict) + " --resume", 300);
  EXPECT_EQ(still.exit_status, 3) << still.output;
  // Gates may be edited after their stage: the run continues.
  const ProgramResult relaxed =
      run_fpdt("extend " + setup.recipe("strict", out, "gates:\n  short_loss: {sequences: 2, max_regression: 100}") + " --resume", 600);
  EXPECT_EQ(relaxed.exit_status, 0) << relaxed.output;
  EXPECT_TRUE(std::filesystem::exists(stage(out, 3, "s1k") + "/step_2"));
}

TEST(Extend, KilledAnywhereAndResumedReachesTheSameWeightsBitwise) {
  const ExtendSetup setup;
  const std::string straight = setup.dir.file("straight"), killed = setup.dir.file("killed");
  const ProgramResult reference = run_fpdt("extend " + setup.recipe("straight", straight, kGates), 600);
  ASSERT_EQ(reference.exit_status, 0) << reference.output;
  const std::string recipe = setup.recipe("killed", killed, kGates);
  Rng rng(fresh_seed());
  int kills = 0;
  uint64_t first_window_ms = 1500;  // halved whenever the run ends before its first kill
  for (int attempt = 0; attempt < 40; ++attempt) {
    std::vector<std::string> args = {"extend", recipe};
    if (kills > 0) args.push_back("--resume");
    const pid_t pid = start_fpdt(args, setup.dir.file("killed.log"));
    // A kill at a random time within the run's few seconds: in training, a checkpoint, a gate or between. The
    // window widens with each attempt, so that a resume that must redo more than the window allows (a gate
    // killed midway runs again) finishes in the end.
    const uint64_t window_ms = kills == 0 ? first_window_ms : 1500 + 500 * static_cast<uint64_t>(attempt);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200 + rng.below(window_ms));
    int status = 0;
    bool exited = false;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (exited) {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << file_bytes(setup.dir.file("killed.log"));
      if (kills > 0) break;
      // It ended before the first kill (a quiet machine ran it within the window): start over, killing sooner.
      std::filesystem::remove_all(killed);
      first_window_ms /= 2;
      continue;
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ++kills;
  }
  std::printf("[ killed   ] %d times\n", kills);
  EXPECT_GT(kills, 0) << "the run ended before the first kill";
  for (const std::string& step : {stage(killed, 1, "s256") + "/step_3", stage(killed, 2, "s512") + "/step_3",
                                  stage(killed, 3, "s1k") + "/step_2"}) {
    const std::string twin = straight + step.substr(killed.size());
    EXPECT_EQ(file_bytes(step + "/model.safetensors"), file_bytes(twin + "/model.safetensors")) << step;
    EXPECT_EQ(file_bytes(step + "/optimizer-0-of-1.safetensors"), file_bytes(twin + "/optimizer-0-of-1.safetensors")) << step;
  }
}

TEST(Extend, MalformedRecipeIsOneClearError) {
  TempDir dir;
  const std::string path = dir.file("bad.yaml");
  write_text_file(path, "model: nowhere\ndata: nowhere\nstages:\n  - {seq: 256, lerning-rate: 1}\n");
  expect_one_clear_error(run_fpdt("extend " + path, 60), {"bad.yaml:1: model"});
  expect_one_clear_error(run_fpdt("extend " + dir.file("none.yaml"), 60), {"cannot read the recipe"});
  expect_one_clear_error(run_fpdt("extend", 60), {"fpdt extend takes one recipe"});
}

}  // namespace
}  // namespace fpdt::testing

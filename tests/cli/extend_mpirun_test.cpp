// `fpdt extend` under mpirun: the tiny three-stage recipe (extend_recipe.h) with `sp: 2`, launched as two
// MPI ranks, runs every stage, gate and the report as the one-rank run of the same recipe does: the same
// stage boundaries (weights and optimizer state carried as the recipe says), the same gates with the same
// verdicts, the first step's loss equal to one rank's within fp32 reordering, one report.
#include <cmath>
#include <filesystem>
#include <string>

#include "cli/extend_recipe.h"
#include "cli/mpirun_program.h"
#include "fpdt/model/config.h"

namespace fpdt::testing {
namespace {

TEST(ExtendMpirun, TwoSequenceParallelRanksRunTheRecipeAsOne) {
  const ExtendSetup setup;
  const std::string one = setup.dir.file("one"), two = setup.dir.file("two");
  const ProgramResult single = run_fpdt("extend " + setup.recipe("one", one, kGates), 600);
  ASSERT_EQ(single.exit_status, 0) << single.output;
  const ProgramResult ranks = run_mpi(mpirun_prefix(2), {"extend", setup.recipe("two", two, kGates, ", sp: 2")});
  ASSERT_EQ(ranks.exit_status, 0) << ranks.output;

  // The first step: the same weights and tokens, its loss summed over two ranks in another order: the fp32
  // bound of the model's sums, in the mean over the step's targets.
  const model::ModelConfig config = model::load_hf_config(setup.tiny.config_path);
  const double want = metrics_lines(stage(one, 1, "s256") + "/metrics.jsonl").front()["loss"].get<double>();
  const double got = metrics_lines(stage(two, 1, "s256") + "/metrics.jsonl").front()["loss"].get<double>();
  const double bound = fp32_bound(transformer_loss_reordering(config, 256, 256, 255.0));
  EXPECT_LE(std::abs(got - want) / want, bound) << got << " vs " << want;

  // Every stage ran to its last step, from the previous one's weights and (as the recipe says) optimizer.
  const std::string s1 = stage(two, 1, "s256") + "/step_3", s2 = stage(two, 2, "s512") + "/step_3",
                    s3 = stage(two, 3, "s1k") + "/step_2";
  for (const std::string& step : {s1, s2, s3}) EXPECT_TRUE(std::filesystem::exists(step + "/model.safetensors")) << step;
  expect_contains(ranks.output, {"weights from " + s1, "optimizer state from " + s1 + ": 3 AdamW updates",
                                 "weights from " + s2});
  EXPECT_EQ(ranks.output.find("optimizer state from " + s2), std::string::npos) << "stage 3 starts its optimizer afresh";

  // The gates: the same ones after every stage, with the same verdicts (their rules pass by far either way;
  // the figures differ only by the steps' rounding).
  for (const auto& [index, name] : {std::pair{1, "s256"}, std::pair{2, "s512"}, std::pair{3, "s1k"}}) {
    const nlohmann::json a = nlohmann::json::parse(file_bytes(stage(one, index, name) + "/gates.json"));
    const nlohmann::json b = nlohmann::json::parse(file_bytes(stage(two, index, name) + "/gates.json"));
    ASSERT_EQ(a["gates"].size(), b["gates"].size()) << name;
    for (size_t g = 0; g < a["gates"].size(); ++g) {
      EXPECT_EQ(a["gates"][g]["gate"], b["gates"][g]["gate"]) << name;
      EXPECT_EQ(a["gates"][g]["passed"], b["gates"][g]["passed"]) << name << " " << a["gates"][g]["gate"];
    }
  }
  // One report, every stage in it.
  const nlohmann::json report = nlohmann::json::parse(file_bytes(two + "/report.json"));
  EXPECT_EQ(report["stages"].size(), 3u);
  EXPECT_TRUE(std::filesystem::exists(two + "/summary.txt"));
}

}  // namespace
}  // namespace fpdt::testing

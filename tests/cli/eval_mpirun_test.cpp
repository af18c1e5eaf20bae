// `fpdt eval --sp 2` under mpirun: the loss by context position and the passkey grid of two processes
// equal one process's (chunked, offloaded to RAM).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "mpirun_program.h"

namespace fpdt::testing {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

TEST(EvalMpirun, TwoRanksEqualOneProcess) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const ProgramResult trained = run_fpdt(join_args(setup.train_args(dir.file("run"), 5)));
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  auto eval_args = [&](const std::string& out, int sp) {
    return std::vector<std::string>{"eval", "--checkpoint", dir.file("run"), "--data", setup.data_dir, "--out", out,
                                    "--seq", "256", "--chunk-tokens", "64", "--offload", "ram", "--batch", "2",
                                    "--threads", "1", "--passkey-lengths", "230,256", "--passkey-depths", "2",
                                    "--passkey-trials", "2", "--sp", std::to_string(sp)};
  };
  const ProgramResult single = run_fpdt(join_args(eval_args(dir.file("one"), 1)));
  ASSERT_EQ(single.exit_status, 0) << single.output;
  const ProgramResult two = run_mpi(mpirun_prefix(2), eval_args(dir.file("two"), 2));
  ASSERT_EQ(two.exit_status, 0) << two.output;

  const nlohmann::json one_loss = read_json(dir.file("one/loss_by_position.json"));
  const nlohmann::json two_loss = read_json(dir.file("two/loss_by_position.json"));
  ASSERT_EQ(one_loss["buckets"].size(), two_loss["buckets"].size());
  EXPECT_EQ(two_loss["ranks"], 2);
  // The same chunks (C = 64) cut over 2 ranks: fp32 rounding of the all-to-all's other summation order
  // in the attention and GEMMs of half the rows, for the model's sequences of 256 tokens, 2 at a time.
  const model::ModelConfig config = model::load_hf_config(setup.config_path);
  auto loss_bound = [&](double tokens) {
    return fp32_bound(transformer_loss_reordering(config, 2 * 256, 256, tokens));
  };
  for (size_t k = 0; k < one_loss["buckets"].size(); ++k) {
    EXPECT_EQ(one_loss["buckets"][k]["tokens"], two_loss["buckets"][k]["tokens"]);
    const double want = one_loss["buckets"][k]["mean_loss"].get<double>();
    EXPECT_NEAR(two_loss["buckets"][k]["mean_loss"].get<double>(), want,
                loss_bound(one_loss["buckets"][k]["tokens"].get<double>()) * want)
        << "bucket " << k;
  }
  const nlohmann::json one_key = read_json(dir.file("one/passkey.json"));
  const nlohmann::json two_key = read_json(dir.file("two/passkey.json"));
  ASSERT_EQ(one_key["cells"].size(), 4u);
  for (size_t n = 0; n < 4; ++n) {
    // Right answers are argmaxes (a flip needs two logits within fp32 rounding of each other); the answer
    // loss is a mean of 6 tokens' losses, each within the rounding above.
    EXPECT_EQ(one_key["cells"][n]["correct"], two_key["cells"][n]["correct"]);
    const double want = one_key["cells"][n]["answer_loss"].get<double>();
    EXPECT_NEAR(two_key["cells"][n]["answer_loss"].get<double>(), want, loss_bound(6) * want);
  }
}

}  // namespace
}  // namespace fpdt::testing

// `fpdt eval` as a user runs it: a trained checkpoint evaluated through chunks offloaded to disk writes
// loss_by_position.json (every position of every sequence counted once) and passkey.json (the grid asked
// for) and prints both; the compute peak does not grow with S; and bad input — S beyond a model's learned
// positions, missing or too little data, data of another vocabulary, a prompt longer than --seq, more ranks
// than the job has — gets one clear error line each. In bf16, eval's loss is training's validation loss on
// the same tokens, and its dry run lays out what the run allocates. A RULER run killed midway goes on from
// its progress file to the uninterrupted run's answers.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <nlohmann/json.hpp>

#include "fpdt/base/file_io.h"
#include "fpdt/model/config.h"
#include "fpdt_program.h"
#include "tolerances.h"

namespace fpdt::testing {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

class EvalCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    setup_ = std::make_unique<TinySetup>(dir_, fresh_seed());
    run_ = dir_.file("run");
    const ProgramResult trained = run_fpdt(join_args(setup_->train_args(run_, 5)));
    ASSERT_EQ(trained.exit_status, 0) << trained.output;
  }
  // The config.json of the run's latest checkpoint.
  std::string latest_config() const { return run_ + "/step_5/config.json"; }
  std::string eval_args(const std::string& more) const {
    return "eval --checkpoint " + run_ + " --data " + setup_->data_dir + " --threads 1 " + more;
  }
  TempDir dir_;
  std::unique_ptr<TinySetup> setup_;
  std::string run_;
};

TEST_F(EvalCommand, WritesLossByPositionAndPasskeyGrid) {
  const ProgramResult result = run_fpdt(eval_args("--seq 256 --chunk-tokens 64 --offload disk --batch 2 --out " +
                                                  dir_.file("eval") +
                                                  " --passkey-lengths 250 --passkey-depths 2 --passkey-trials 1"));
  ASSERT_EQ(result.exit_status, 0) << result.output;
  expect_contains(result.output, {"loss by context position", "128-256", "passkey retrieval", "compute peak"});
  const nlohmann::json loss = read_json(dir_.file("eval/loss_by_position.json"));
  EXPECT_EQ(loss["seq"], 256);
  EXPECT_NE(loss["checkpoint"].get<std::string>().find("step_5"), std::string::npos);
  // val.bin holds ~10% of the tiny corpus: every whole sequence of 256 tokens is evaluated, each position once.
  const int64_t sequences = loss["sequences"];
  EXPECT_GE(sequences, 2);
  double tokens = 0.0, loss_sum = 0.0;
  for (const auto& bucket : loss["buckets"]) {
    EXPECT_EQ(bucket["tokens"].get<double>(),
              static_cast<double>(sequences * (bucket["last"].get<int64_t>() - bucket["first"].get<int64_t>() + 1)));
    tokens += bucket["tokens"].get<double>();
    loss_sum += bucket["loss_sum"].get<double>();
  }
  EXPECT_EQ(tokens, static_cast<double>(sequences * 256));
  EXPECT_NEAR(loss["mean_loss"].get<double>(), loss_sum / tokens, 1e-12);
  EXPECT_LT(loss["mean_loss"].get<double>(), 5.55);  // five steps beat the uniform log(257)
  const nlohmann::json passkey = read_json(dir_.file("eval/passkey.json"));
  ASSERT_EQ(passkey["cells"].size(), 2u);
  EXPECT_EQ(passkey["cells"][1]["depth"], 1.0);
  EXPECT_EQ(passkey["cells"][1]["length"], 250);
}

// --rope-theta / --rope-scaling change the RoPE of the model evaluated (a training-free extension),
// not the checkpoint: the JSON and the log say which RoPE ran, and the loss is another model's.
TEST_F(EvalCommand, RopeOverridesApplyToTheEvaluatedModelNotTheCheckpoint) {
  const std::string config_path = latest_config();
  const std::string config_before = file_bytes(config_path);
  const std::string common = "--seq 256 --chunk-tokens 64 --passkey-trials 0 --out ";
  const ProgramResult plain = run_fpdt(eval_args(common + dir_.file("plain")));
  ASSERT_EQ(plain.exit_status, 0) << plain.output;
  const ProgramResult extended = run_fpdt(eval_args(
      common + dir_.file("yarn") +
      " --rope-theta 40000 --rope-scaling '{\"rope_type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 64}'"));
  ASSERT_EQ(extended.exit_status, 0) << extended.output;
  expect_contains(extended.output, {"theta 40000, yarn x4", "from --rope-*"});
  const nlohmann::json a = read_json(dir_.file("plain/loss_by_position.json"));
  const nlohmann::json b = read_json(dir_.file("yarn/loss_by_position.json"));
  EXPECT_EQ(a["rope_overridden"], false);
  EXPECT_EQ(a["rope_parameters"]["rope_type"], "default");
  EXPECT_EQ(b["rope_overridden"], true);
  EXPECT_EQ(b["rope_parameters"]["rope_type"], "yarn");
  EXPECT_EQ(b["rope_parameters"]["rope_theta"], 40000.0);
  EXPECT_EQ(b["rope_parameters"]["factor"], 4.0);
  EXPECT_NE(a["mean_loss"], b["mean_loss"]);
  EXPECT_EQ(file_bytes(config_path), config_before);
  // A bad override is one clear error, as in train.
  const ProgramResult bad = run_fpdt(eval_args(common + dir_.file("bad") + " --rope-scaling '{\"rope_type\": \"linear\"}'"));
  EXPECT_NE(bad.exit_status, 0);
  expect_contains(bad.output, {"[model] ", "--rope-scaling of rope_type linear needs 'factor'"});
}

// The compute tier holds the model and O(B·C·h) chunk buffers: 16× the sequence, the same peak.
TEST_F(EvalCommand, ComputePeakDoesNotGrowWithTheSequence) {
  const auto peak = [&](int64_t S) {
    const ProgramResult result = run_fpdt(eval_args("--seq " + std::to_string(S) + " --chunk-tokens 32 --offload ram "
                                                    "--passkey-trials 0 --sequences 1 --split train --out " +
                                                    dir_.file("eval" + std::to_string(S))));
    EXPECT_EQ(result.exit_status, 0) << result.output;
    return read_json(dir_.file("eval" + std::to_string(S) + "/loss_by_position.json"));
  };
  const nlohmann::json short_run = peak(128), long_run = peak(2048);
  EXPECT_EQ(short_run["compute_peak_bytes"], long_run["compute_peak_bytes"]);
  EXPECT_LT(short_run["offload_peak_bytes"].get<int64_t>() * 8, long_run["offload_peak_bytes"].get<int64_t>());
  // The dry run lays out what the runs allocate: the same peaks at 2048, and at 4 times the length the
  // same compute peak, the offload tier 4 times the one at 2048.
  const auto dry = [&](int64_t S) {
    const ProgramResult result = run_fpdt(eval_args("--seq " + std::to_string(S) + " --chunk-tokens 32 --offload ram --dry-run"));
    EXPECT_EQ(result.exit_status, 0) << result.output;
    return nlohmann::json::parse(result.output.substr(result.output.rfind("{\"dry_run\"")));
  };
  const nlohmann::json dry_long = dry(2048), dry_huge = dry(4 * 2048);
  EXPECT_EQ(dry_long["compute_peak_bytes"], long_run["compute_peak_bytes"]);
  EXPECT_EQ(dry_long["offload_peak_bytes"], long_run["offload_peak_bytes"]);
  EXPECT_EQ(dry_huge["compute_peak_bytes"], long_run["compute_peak_bytes"]);
  EXPECT_EQ(dry_huge["offload_peak_bytes"].get<int64_t>(), long_run["offload_peak_bytes"].get<int64_t>() * 4);
}

// A --batch beyond the sequences of the split: each forward takes the sequences there are (host buffers of
// --batch rows of --seq tokens were 24 GB here, an "[internal] std::bad_alloc").
TEST_F(EvalCommand, ABatchBeyondTheSequencesTakesThoseThereAre) {
  const ProgramResult result =
      run_fpdt(eval_args("--seq 64 --batch 2000000000 --passkey-trials 0 --out " + dir_.file("eval")), 120);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_EQ(result.output.find("[internal]"), std::string::npos) << result.output;
  EXPECT_GE(read_json(dir_.file("eval/loss_by_position.json"))["sequences"].get<int64_t>(), 2);
}

// A RULER run stopped by SIGKILL goes on where it stopped: its progress file keeps every scored sample, a
// rerun under another precision is refused by name and leaves the file as it was, and the same command
// answers only the prompts left, ending with the uninterrupted run's ruler.json.
TEST_F(EvalCommand, AStoppedRulerRunGoesOnWhereItStopped) {
  auto args = [&](const std::string& out, int64_t samples) {
    return std::vector<std::string>{
        "eval", "--checkpoint", run_, "--data", setup_->data_dir, "--threads", "1", "--seq", "1024",
        "--rope-scaling", R"({"rope_type": "yarn", "factor": 4})", "--chunk-tokens", "256", "--offload", "ram",
        "--sequences", "1", "--passkey-lengths", "none", "--tasks", "niah_single_1", "--ruler-lengths", "1024",
        "--ruler-samples", std::to_string(samples), "--out", out};
  };
  const auto whole_lines = [](const std::string& path) {
    std::ifstream file(path);
    const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    return static_cast<int64_t>(std::count(text.begin(), text.end(), '\n'));
  };
  // Killed once the file holds a sample (its header and one line); a run that ended first (a loaded machine
  // polling late) is tried again with more samples.
  const std::string stopped = dir_.file("stopped"), progress = stopped + "/ruler_progress.jsonl";
  int64_t samples = 30;
  for (int attempt = 0; attempt < 4 && !std::filesystem::exists(progress); ++attempt, samples *= 2) {
    std::filesystem::remove_all(stopped);
    const pid_t pid = start_fpdt(args(stopped, samples), dir_.file("stopped.log"));
    int status = 0;
    while (whole_lines(progress) < 2 && ::waitpid(pid, &status, WNOHANG) == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(std::filesystem::exists(progress));
  const int64_t kept = whole_lines(progress) - 1;
  ASSERT_GE(kept, 1);
  ASSERT_LT(kept, samples / 2);  // samples was doubled after the last attempt
  // Its header names the weights by size and modification time, the time as stat gives it (since 1970).
  std::ifstream header_file(progress);
  std::string header_line;
  std::getline(header_file, header_line);
  const nlohmann::json header = nlohmann::json::parse(header_line).at("ruler_progress");
  const nlohmann::json& weights = header.at("weights").at(0);
  struct stat weights_stat {};
  ASSERT_EQ(::stat((header.at("checkpoint").get<std::string>() + "/" + weights.at("file").get<std::string>()).c_str(),
                   &weights_stat),
            0);
  EXPECT_EQ(weights.at("bytes").get<int64_t>(), weights_stat.st_size);
  EXPECT_EQ(weights.at("modified_unix_ns").get<int64_t>(),
            int64_t{weights_stat.st_mtim.tv_sec} * 1000000000 + weights_stat.st_mtim.tv_nsec);

  std::vector<std::string> bf16 = args(stopped, samples / 2);
  bf16.insert(bf16.end(), {"--precision", "bf16"});
  const std::string before = read_text_file(progress, "test", "");
  expect_one_clear_error(run_fpdt(join_args(bf16)), {"[ruler]", progress, "precision \"fp32\" there, \"bf16\" now",
                                                     "delete the file"});
  EXPECT_EQ(read_text_file(progress, "test", ""), before);

  const ProgramResult resumed = run_fpdt(join_args(args(stopped, samples / 2)));
  ASSERT_EQ(resumed.exit_status, 0) << resumed.output;
  expect_contains(resumed.output, {"ruler: " + std::to_string(kept) + " of " + std::to_string(samples / 2) +
                                   " prompts already answered"});
  EXPECT_FALSE(std::filesystem::exists(progress));  // ruler.json holds them all
  const ProgramResult straight = run_fpdt(join_args(args(dir_.file("straight"), samples / 2)));
  ASSERT_EQ(straight.exit_status, 0) << straight.output;
  const nlohmann::json ours = read_json(stopped + "/ruler.json"), theirs = read_json(dir_.file("straight/ruler.json"));
  ASSERT_EQ(ours["samples"].size(), theirs["samples"].size());
  for (size_t i = 0; i < ours["samples"].size(); ++i)
    for (const char* field : {"index", "prompt_ids", "generated_ids", "prediction", "score"})
      EXPECT_EQ(ours["samples"][i][field], theirs["samples"][i][field]) << i << " " << field;
  EXPECT_EQ(ours["cells"][0]["score"], theirs["cells"][0]["score"]);
}

TEST_F(EvalCommand, BadInputGetsOneClearError) {
  // S beyond a model's learned positions (the GPT-2 golden model has 64).
  const std::string gpt2 = std::string(FPDT_SOURCE_DIR) + "/tests/golden/gpt2";
  expect_one_clear_error(run_fpdt("eval --checkpoint " + gpt2 + " --data " + setup_->data_dir + " --seq 128"),
                         {"[pipeline]", "128 tokens exceeds the 64 learned positions", "lower --seq"});
  // Missing data, too little of it, more sequences than it holds.
  expect_one_clear_error(run_fpdt(eval_args("--seq 64 --data " + dir_.file("nowhere"))),
                         {"[eval]", "no val.bin in " + dir_.file("nowhere"), "fpdt tokenize --tokenizer"});
  expect_one_clear_error(run_fpdt(eval_args("--seq 1M")), {"[eval]", "val.bin holds", "fewer than one sequence of --seq 1048576"});
  expect_one_clear_error(run_fpdt(eval_args("--seq 256 --sequences 1000")), {"[eval]", "--sequences 1000 asks for more"});
  // Data of another vocabulary: shards of a BPE tokenizer for a byte-level checkpoint.
  const std::string fixtures = std::string(FPDT_SOURCE_DIR) + "/tests/data/fixtures/tokenizers/";
  write_text_file(dir_.file("text.txt"), std::string(2000, 'a') + " In the beginning God created the heaven.\n");
  const ProgramResult made = run_fpdt("tokenize --tokenizer " + fixtures + "gpt2 --val-fraction 0.5 --out " +
                                      dir_.file("bpe") + " " + dir_.file("text.txt"));
  ASSERT_EQ(made.exit_status, 0) << made.output;
  expect_one_clear_error(run_fpdt(eval_args("--seq 16 --data " + dir_.file("bpe"))),
                         {"[eval]", "val.bin was made by tokenizer 0x", "(vocabulary 500)", "trained with tokenizer",
                          "(vocabulary 257)"});
  // A passkey prompt longer than --seq, or shorter than its fixed parts.
  expect_one_clear_error(run_fpdt(eval_args("--seq 128 --passkey-lengths 256")),
                         {"[eval]", "256 tokens is longer than --seq 128"});
  expect_one_clear_error(run_fpdt(eval_args("--seq 128 --passkey-lengths 100")),
                         {"[eval]", "shorter than its fixed parts"});
  // Options: more ranks than the job, chunks that do not fit, a value that makes no sense.
  expect_one_clear_error(run_fpdt(eval_args("--seq 128 --sp 2")), {"[eval]", "--sp 2 ranks, but the job has 1"});
  expect_one_clear_error(run_fpdt(eval_args("--seq 128 --chunk-tokens 512")),
                         {"[eval]", "--chunk-tokens 512 is longer than the sequence of 128 tokens"});
  expect_one_clear_error(run_fpdt(eval_args("--seq 128 --split test")), {"[cli]", "--split"});
  expect_one_clear_error(run_fpdt("eval --checkpoint " + dir_.file("nothing") + " --seq 128"),
                         {"[checkpoint]", "neither a run folder"});
}

// bf16 (the forward-only states keep the weights' bf16 working copy): `fpdt eval` of a bf16 run's last
// checkpoint on the first 4 sequences of val.bin gives the loss `fpdt train` validated that checkpoint's
// weights with on the same 4 windows (--eval-batches 2 of --batch 2). Both sides are bf16 pipelines that
// may chunk differently: bf16_bound of the forward's roundings, both sides rounding, averaged over the
// tokens. The dry run lays out the forward the run allocates: the same compute peak.
TEST(EvalBf16, LossIsTrainingsValidationLossAndTheDryRunLaysItOut) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const std::string run = dir.file("run");
  std::vector<std::string> args = setup.train_args(run, 2);
  args.insert(args.end(), {"--precision", "bf16", "--chunks", "2"});
  const ProgramResult trained = run_fpdt(join_args(args));
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  const std::vector<nlohmann::json> metrics = metrics_lines(run + "/metrics.jsonl");
  ASSERT_FALSE(metrics.empty());
  const double validated = metrics.back()["val_loss"].get<double>();

  const std::string common = "eval --checkpoint " + run + " --data " + setup.data_dir +
                             " --threads 1 --precision bf16 --seq 32 --batch 2 --chunk-tokens 8 --offload ram";
  const ProgramResult evaluated = run_fpdt(common + " --sequences 4 --passkey-trials 0 --out " + dir.file("eval"));
  ASSERT_EQ(evaluated.exit_status, 0) << evaluated.output;
  const nlohmann::json loss = read_json(dir.file("eval/loss_by_position.json"));
  const double tokens = 4 * 32;
  const double bound = bf16_bound(bf16_roundings(model::load_hf_config(setup.config_path), false), true, tokens);
  EXPECT_LE(std::abs(loss["mean_loss"].get<double>() - validated), bound * validated)
      << "eval " << loss["mean_loss"] << ", train's validation " << validated;

  const ProgramResult dry = run_fpdt(common + " --dry-run");
  ASSERT_EQ(dry.exit_status, 0) << dry.output;
  const nlohmann::json laid_out = nlohmann::json::parse(dry.output.substr(dry.output.rfind("{\"dry_run\"")));
  EXPECT_EQ(laid_out["compute_peak_bytes"], loss["compute_peak_bytes"]);
  EXPECT_EQ(laid_out["offload_peak_bytes"], loss["offload_peak_bytes"]);
}

}  // namespace
}  // namespace fpdt::testing

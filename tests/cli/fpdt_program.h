// Helpers for tests that run the `fpdt` program itself: run it and capture its output, start it in
// the background and kill it, set up a tiny model and corpus to train on, and read what a run wrote.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fpdt/tensor/safetensors.h"
#include "fpdt/train/settings.h"
#include "testing.h"

namespace fpdt::testing {

inline std::string fpdt_binary() { return std::string(FPDT_BINARY_DIR) + "/fpdt"; }

struct ProgramResult {
  int exit_status = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command to completion and captures its stdout and stderr.
inline ProgramResult run_command(const std::string& command) {
  ProgramResult result;
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, got);
  const int status = ::pclose(pipe);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// Runs `fpdt <args>` (args are shell words, already quoted as needed) to completion; with a limit in
// seconds, a run that outlives it is killed (exit status 137) instead of hanging the test.
inline ProgramResult run_fpdt(const std::string& args, int limit_seconds = 0) {
  const std::string limit = limit_seconds > 0 ? "timeout -s KILL " + std::to_string(limit_seconds) + " " : "";
  return run_command(limit + fpdt_binary() + " " + args);
}

// `command` run with `folder` a read-only tmpfs, in a mount namespace of its own (nothing outside sees
// it). Needs root (unshare -m, mount): CI runs the suite as root; elsewhere the caller skips.
inline ProgramResult run_on_read_only_folder(const std::string& folder, const std::string& command) {
  return run_command("unshare -m sh -c 'mount -t tmpfs -o ro fpdt-ro " + folder + " || { echo MOUNT-FAILED; exit 99; }; " +
                     command + "'");
}

// Starts `program <args...>` in the background with its output to `log_path`; returns its pid.
inline pid_t start_program(const std::string& program, const std::vector<std::string>& args,
                           const std::string& log_path) {
  std::fflush(stdout);  // or the child's freopen would write our buffered output a second time
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* log = std::freopen(log_path.c_str(), "w", stdout);
    if (log == nullptr || ::dup2(::fileno(stdout), 2) < 0) ::_exit(127);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(program.c_str()));
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execvp(program.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

// Starts `fpdt <args...>` in the background with its output to `log_path`; returns its pid.
inline pid_t start_fpdt(const std::vector<std::string>& args, const std::string& log_path) {
  return start_program(fpdt_binary(), args, log_path);
}

// A tiny Llama (config.json) and a corpus of pseudo-sentences tokenized into <dir>/data.
struct TinySetup {
  std::string config_path;
  std::string data_dir;
  explicit TinySetup(const TempDir& dir, uint64_t seed) {
    config_path = dir.file("tiny.json");
    write_text_file(config_path, R"({"model_type": "llama", "vocab_size": 257, "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})");
    const char* words[] = {"the", "light", "and", "darkness", "waters", "earth", "said", "was", "good", "day"};
    Rng rng(seed);
    std::string text;
    while (text.size() < 40000) {
      for (int w = 0; w < 8; ++w) text += std::string(words[rng.below(10)]) + " ";
      text += ".\n";
    }
    write_text_file(dir.file("corpus.txt"), text);
    data_dir = dir.file("data");
    const ProgramResult tokenized = run_fpdt("tokenize --out " + data_dir + " --val-fraction 0.1 " + dir.file("corpus.txt"));
    EXPECT_EQ(tokenized.exit_status, 0) << tokenized.output;
  }
  // The settings of thread-rank runs over the setup (train::train in this process): `steps` steps of
  // one sequence of 30 tokens (not a multiple of the ranks or the chunk: padded) per replica, in 2
  // chunks offloaded to RAM, on sp × dp ranks; evaluation and checkpoints only at the end.
  train::TrainSettings settings(const std::string& out_dir, int64_t steps, int sp, int dp) const {
    train::TrainSettings s;
    s.run.model = config_path;
    s.data_dir = data_dir;
    s.out_dir = out_dir;
    s.steps = steps;
    s.run.batch_size = 1;
    s.run.seq_tokens = 30;
    s.eval_every = 0;
    s.eval_batches = 1;
    s.save_every = 0;
    s.run.threads = 1;
    s.peak_gflops = 100;
    s.optimizer.warmup_steps = 2;
    s.optimizer.lr = 1e-3;  // as train_args, for the reason given there
    s.run.sp = sp;
    s.run.dp = dp;
    s.run.chunks = 2;
    s.run.offload = pipeline::OffloadConfig{pipeline::OffloadKind::ram, ""};
    return s;
  }
  // Training options shared by the runs a test compares (warmup 3 steps, or the whole of a shorter
  // run). lr 1e-3: AdamW's update m/√v has the size
  // lr whatever the gradient's size, so a gradient entry near fp32 noise can move by ±lr in runs that
  // sum in another order (other ranks, other chunks); a small lr keeps that below the 1e-5 bars.
  std::vector<std::string> train_args(const std::string& out_dir, int64_t steps) const {
    return {"train",     "--model",      config_path, "--data",        data_dir, "--out",       out_dir,
            "--steps",   std::to_string(steps),      "--batch",       "2",      "--seq",       "32",
            "--warmup",  std::to_string(std::min<int64_t>(3, steps)), "--lr",     "1e-3",          "--eval-every", "5",    "--eval-batches",
            "2",         "--save-every", "5",        "--threads",     "2",      "--peak-gflops", "100"};
  }
};

// Exit status 1 and exactly one error line, which contains every part.
inline void expect_one_clear_error(const ProgramResult& result, std::initializer_list<std::string> parts) {
  EXPECT_EQ(result.exit_status, 1) << result.output;
  int error_lines = 0;
  std::string error_line;
  size_t begin = 0;
  while (begin < result.output.size()) {
    size_t end = result.output.find('\n', begin);
    if (end == std::string::npos) end = result.output.size();
    const std::string line = result.output.substr(begin, end - begin);
    if (line.starts_with("[") && line.find("] ") != std::string::npos && !line.starts_with("[ ")) {
      ++error_lines;
      error_line = line;
    }
    begin = end + 1;
  }
  EXPECT_EQ(error_lines, 1) << result.output;
  for (const std::string& part : parts) EXPECT_NE(error_line.find(part), std::string::npos) << "'" << part << "' not in: " << error_line;
  EXPECT_EQ(result.output.find("terminate called"), std::string::npos) << result.output;
}

// Every weight of a checkpoint folder's model.safetensors, tensors concatenated in file order.
inline std::vector<float> checkpoint_weights(const std::string& folder) {
  SafetensorsReader reader(folder + "/model.safetensors");
  std::vector<float> all;
  for (const std::string& name : reader.names()) {
    const std::vector<float> values = reader.read_floats(name);
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

// The lines of a metrics.jsonl in file order; a line that is not JSON (the one being written when a
// run was killed) is left out.
inline std::vector<nlohmann::json> metrics_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!json.is_discarded()) lines.push_back(std::move(json));
  }
  return lines;
}

// The logged steps in file order, each with its deterministic fields.
inline std::vector<std::pair<int64_t, nlohmann::json>> logged_steps(const std::string& path) {
  std::vector<std::pair<int64_t, nlohmann::json>> steps;
  for (const nlohmann::json& json : metrics_lines(path)) {
    nlohmann::json kept = {{"loss", json["loss"]}, {"lr", json["lr"]}, {"grad_norm", json["grad_norm"]}};
    if (json.contains("val_loss")) kept["val_loss"] = json["val_loss"];
    steps.emplace_back(json["step"].get<int64_t>(), kept);
  }
  return steps;
}

// The checkpoint a run folder's `latest` names ("step_N"; "" when none).
inline std::string latest_of(const std::string& run) {
  std::ifstream file(run + "/latest");
  std::string name;
  std::getline(file, name);
  return name;
}

// The furthest step a run folder's metrics.jsonl logged (0 when none).
inline int64_t last_logged_step(const std::string& run) {
  int64_t last = 0;
  for (const auto& [step, fields] : logged_steps(run + "/metrics.jsonl")) last = std::max(last, step);
  return last;
}

inline std::string join_args(const std::vector<std::string>& args) {
  std::string joined;
  for (const std::string& arg : args) joined += "'" + arg + "' ";
  return joined;
}

}  // namespace fpdt::testing

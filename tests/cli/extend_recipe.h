// The tiny extension the `fpdt extend` tests run (tests/cli/extend_test.cpp, extend_mpirun_test.cpp): a base
// model of 2 steps of the tiny Llama (context 256, byte data) and a recipe of three stages, S 256 → 512 → 1K.
#pragma once

#include <string>

#include "cli/fpdt_program.h"
#include "fpdt/tensor/safetensors.h"
#include "testing.h"

namespace fpdt::testing {

// The base model (2 steps of the tiny Llama: a checkpoint with its tokenizer) and its data.
struct ExtendSetup {
  TempDir dir;
  TinySetup tiny{dir, fresh_seed()};
  std::string base;
  ExtendSetup() {
    base = dir.file("base");
    const ProgramResult trained = run_fpdt("train --model " + tiny.config_path + " --data " + tiny.data_dir + " --out " + base +
                                           " --steps 2 --batch 1 --seq 64 --threads 2 --peak-gflops 100 --eval-batches 0");
    EXPECT_EQ(trained.exit_status, 0) << trained.output;
  }
  // A recipe of three stages into `out`, with `gates` as its top-level gates and `train` added to its
  // train options (", sp: 2"); returns its path.
  std::string recipe(const std::string& name, const std::string& out, const std::string& gates,
                     const std::string& train = "") const {
    const std::string path = dir.file(name + ".yaml");
    write_text_file(path, "model: " + base + "/step_2\ndata: " + tiny.data_dir + "\nout: " + out + R"(
train: {batch: 1, threads: 2, peak-gflops: 100, lr: 1e-3, warmup: 1, eval-every: 0, eval-batches: 1, save-every: 2)" + train + R"(}
)" + gates + R"(
stages:
  - name: s256
    seq: 256
    steps: 3
    chunk-tokens: 128
    offload: ram
  - name: s512
    seq: 512
    steps: 3
    rope: {type: yarn, factor: 2}
    layout: auto
  - name: s1k
    seq: 1K
    steps: 2
    rope: {theta: 40000}
    optimizer: fresh
    chunk-tokens: 256
    offload: disk
    gates:
      ruler: {tasks: niah_single_1, samples: 2, min_score: 0}
)");
    return path;
  }
};

inline constexpr const char* kGates = "gates:\n  position_loss: {sequences: 1, max_excess: 5}\n  short_loss: {sequences: 2, max_regression: 1}";

inline std::string stage(const std::string& out, int index, const std::string& name) {
  return out + "/stage" + std::to_string(index) + "-" + name;
}

// The AdamW update count an optimizer shard of a step folder records.
inline int64_t optimizer_updates(const std::string& step_folder) {
  return std::stoll(SafetensorsReader(step_folder + "/optimizer-0-of-1.safetensors").metadata("step"));
}

}  // namespace fpdt::testing

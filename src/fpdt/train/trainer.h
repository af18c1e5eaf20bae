// The training loop: data → forward/backward (with gradient accumulation) → clipping → AdamW →
// metrics, periodic validation and checkpoints, and exact resume. `fpdt train` is a thin shell over
// train(); tests call it directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fpdt/comm/communicator.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/train/optimizer.h"

namespace fpdt::train {

struct TrainSettings {
  std::string model = "llama-demo";   // preset name or path to a Hugging Face config.json
  std::string init_from;              // Hugging Face folder: its config.json and weights ("": random init)
  std::optional<double> rope_theta;   // replaces the model's RoPE base (context extension)
  std::string rope_scaling;           // replaces its RoPE scaling: a rope_parameters JSON object ("": keep)
  std::string data_dir = "data/kjv";  // holds train.bin and val.bin (from `fpdt tokenize`)
  std::string out_dir = "runs/demo";  // checkpoints, metrics.jsonl
  std::string backend = "cpu";
  int64_t steps = 300;
  int64_t batch_size = 8;             // sequences per micro-batch
  int64_t seq_tokens = 256;           // S
  int64_t grad_accum = 1;             // micro-batches per optimizer step
  int64_t eval_every = 50;            // 0: only at the end
  int64_t eval_batches = 8;            // 0: no validation
  int64_t save_every = 100;           // 0: only at the end
  int64_t sample_tokens = 0;          // generate this many tokens at the end (0: none)
  std::string sample_prompt = "\n";
  bool resume = false;                // continue from <out_dir>/latest when it exists
  uint64_t seed = 1234;
  int threads = 0;                    // 0: all cores
  double peak_gflops = 0.0;           // 0: measure with the FMA micro-benchmark
  int64_t compute_mem_bytes = 0;      // 0: unlimited
  // Parallelism and the FPDT pipeline. world = dp × sp ranks; sp ranks share each sequence.
  int sp = 1;
  int dp = 1;
  std::string mode = "fpdt";          // "fpdt" or "ulysses" (one chunk, nothing offloaded)
  int64_t chunk_tokens = 0;           // C, global tokens per chunk (0: use `chunks`)
  int chunks = 1;                     // u
  std::string offload = "none";       // none | ram | disk:DIR
  std::string recompute = "none";     // none | layer
  int64_t offload_mem_bytes = 0;      // 0: unlimited
  bool dry_run = false;               // lay out one step's memory, report the tier peaks, train nothing
  std::string trace_path;             // write a Chrome trace of the run here ("": none)
  int64_t stop_after_steps = 0;       // exit after this many steps of this process (after any checkpoint
                                      // due then, without the end-of-run work), as a preempted job
                                      // would; 0: off
  OptimizerConfig optimizer;
};

struct TrainResult {
  size_t compute_peak_bytes = 0;   // this rank, over the run (a dry run: its layout)
  size_t offload_peak_bytes = 0;
  size_t peak_rss_bytes = 0;       // the process's peak resident set (VmHWM)
  uint64_t alltoall_bytes_per_step = 0;  // sent by this rank in its sequence-parallel group (last step)
  int64_t first_step = 0;     // first step this process ran
  int64_t last_step = 0;
  double first_loss = 0.0;    // training loss of first_step
  double last_loss = 0.0;
  double first_val_loss = -1.0;  // validation loss before training (fresh runs only), else < 0
  double last_val_loss = -1.0;
  std::string sample;         // generated text, when sample_tokens > 0
};

// Trains on `world` (all ranks call it; rank 0 logs, saves and samples). Throws fpdt::Error.
TrainResult train(const TrainSettings& settings, comm::Communicator& world);

// The pipeline configuration the settings ask for (mode ulysses: one chunk, nothing offloaded).
pipeline::PipelineConfig pipeline_config(const TrainSettings& settings);

// The process's peak resident set size (VmHWM from /proc/self/status), or 0 where unknown.
size_t peak_rss_bytes();

// Sets OpenMP's and OpenBLAS's thread counts (0: all cores) and returns the count in use.
int set_threads(int threads);

}  // namespace fpdt::train

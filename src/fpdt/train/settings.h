// What a training run is asked to do: TrainSettings, and its options declared once
// (declare_train_options binds each `fpdt train` option straight to its field, with its meaning
// check and help). The same declaration parses the command line, checks settings made in code, and
// gives the run's settings as JSON (trainer_state.json) and as the rows of the start-up table.
// Adding an option is one line in declare_train_options plus its field here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fpdt/base/options.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/train/optimizer.h"

namespace fpdt::train {

// Test hook, never an option: makes steps non-finite on purpose so tests can watch the guard work, or
// kills a rank in the middle of a checkpoint. The `fpdt` program reads it from the environment:
// FPDT_TEST_FAULT="lr-inf@K" (every update from step K on uses lr = inf), "nan-grad@K" /
// "nan-grad@KxN" (a NaN in rank 0's gradient, before the all-reduce, in steps K .. K+N−1; N = 1 without
// "xN"), or "kill-in-save@K" (the last rank kills itself with SIGKILL once it has written its optimizer
// shard of step K's checkpoint, before the checkpoint is complete).
struct FaultInjection {
  int64_t lr_inf_from_step = 0;    // 0: never
  int64_t nan_grad_from_step = 0;  // 0: never
  int64_t nan_grad_steps = 0;
  int64_t kill_in_save_step = 0;   // 0: never
};
// Parses FPDT_TEST_FAULT's value ("" → no fault); throws fpdt::Error for anything else.
FaultInjection parse_fault_injection(const std::string& text);

// The model of a new run that names none.
inline constexpr const char* kDefaultModel = "llama-demo";

// The run a new `fpdt train` describes unless told otherwise. Its model "" (not given) means
// kDefaultModel, or with --resume the checkpoint's model; a disk offload without a directory goes in
// the run's folder.
inline pipeline::RunSpec default_train_run() {
  pipeline::RunSpec run;
  run.seq_tokens = 256;
  run.batch_size = 8;
  run.offload = pipeline::OffloadConfig{pipeline::OffloadKind::none, ""};
  return run;
}

struct TrainSettings {
  pipeline::RunSpec run = default_train_run();  // what the run is (the options every command shares)
  std::string init_from;              // Hugging Face folder or GGUF file: its model and weights ("": random init)
  bool init_optimizer = false;        // and, init_from a step folder of a run, its AdamW moments and update count
  std::optional<double> rope_theta;   // replaces the model's RoPE base (context extension)
  std::string rope_scaling;           // replaces its RoPE scaling: a rope_parameters JSON object ("": keep)
  std::string data_dir = "data/kjv";  // holds train.bin and val.bin (from `fpdt tokenize`)
  std::string mixture;                // "": train on data_dir's train.bin; else the sources the rows are drawn
                                      // from (data/mixture.h's spelling), validation still on data_dir's val.bin
  std::string out_dir = "runs/demo";  // checkpoints, metrics.jsonl
  int64_t steps = 300;
  int64_t grad_accum = 1;             // micro-batches per optimizer step
  int64_t max_nonfinite_steps = 3;    // stop when this many steps in a row had a non-finite loss or
                                      // gradient norm (each is skipped, not applied)
  int64_t eval_every = 50;            // 0: only at the end
  int64_t eval_batches = 8;           // 0: no validation
  int64_t save_every = 100;           // 0: only at the end
  int64_t sample_tokens = 0;          // generate this many tokens at the end (0: none)
  std::string sample_prompt = "\n";
  bool resume = false;                // continue from <out_dir>/latest when it exists
  bool overwrite = false;             // a fresh run into a folder holding a run: remove that run first
  uint64_t seed = 1234;
  double peak_gflops = 0.0;           // 0: measure with the FMA micro-benchmark
  double comm_timeout_seconds = comm::kDefaultDeadlineSeconds;  // a rank silent this long ends the job
  bool dry_run = false;               // lay out one step's memory, report the tier peaks, train nothing
  bool print_schedule = false;        // with dry_run: print the FPDT schedule of a training step
  std::string trace_path;             // write a Chrome trace of the run here ("": none)
  int64_t stop_after_steps = 0;       // exit after this many steps of this process (after any checkpoint
                                      // due then, without the end-of-run work), as a preempted job
                                      // would; 0: off
  // Signals taken as a preemption (base/preemption.h): the run finishes its step, saves it and exits with
  // kPreemptedExitStatus; "none": their default actions.
  std::string preempt_signals = "TERM,INT,USR1";
  OptimizerConfig optimizer;          // decay_steps 0: decay until `steps`
  FaultInjection fault;               // test hook (see FaultInjection)
};

// Declares every `fpdt train` option, bound to the fields of `settings`.
void declare_train_options(OptionSet& set, TrainSettings& settings);

// Checks every field against its option's meaning and the options against each other (a chunk count
// that leaves chunks empty, token buffers larger than this machine's memory, --resume with
// --overwrite, ...). Throws one fpdt::Error naming the option.
void check_settings(const TrainSettings& settings);

// What the `train` and `eval` of this build cannot run: --mode fpdt-reference; a backend whose compute
// tier the host cannot read (cuda, cpu-guarded) on more than one rank (sp × dp: there is no NCCL
// communicator yet) or with the optimizer offloaded (its reduce-scatter reads the compute tier on the
// host).
void check_runnable(const std::string& module, const pipeline::RunSpec& run);

// Throws fpdt::Error of `module` when a step of `model` over `run`'s micro-batches (--batch sequences of
// --seq tokens) has buffers of more bytes than 64-bit sizes count (pipeline::layout_fits_64_bits): refused
// before the step is laid out, naming --seq and the model.
void check_layout_fits(const std::string& module, const pipeline::FpdtModel& model, const pipeline::RunSpec& run);

// The settings as {"option": value} in declaration order, and as "option  value" rows for a person.
nlohmann::ordered_json settings_json(const TrainSettings& settings);
std::vector<std::pair<std::string, std::string>> settings_rows(const TrainSettings& settings);

}  // namespace fpdt::train

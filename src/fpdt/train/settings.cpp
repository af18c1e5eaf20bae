// Training settings and their options (see settings.h).
#include "fpdt/train/settings.h"

#include <cstdio>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"
#include "fpdt/base/preemption.h"
#include "fpdt/base/machine.h"
#include "fpdt/data/mixture.h"
#include "fpdt/model/gguf.h"
#include "fpdt/pipeline/model_states.h"
#include "fpdt/pipeline/run_options.h"

namespace fpdt::train {

namespace {

constexpr const char* kModule = "train";

std::string str(int64_t value) { return std::to_string(value); }

// The token buffers of a step live in host memory: dp·B rows of S inputs and S targets per
// micro-batch, grad_accum micro-batches and one validation batch.
void check_batch_memory(const TrainSettings& s) {
  const long double bytes = static_cast<long double>(s.grad_accum + 1) * s.run.dp * s.run.batch_size * s.run.seq_tokens *
                            (2 * sizeof(int32_t));
  const long double ram = static_cast<long double>(machine_memory_bytes());
  if (ram > 0 && bytes > ram)
    throw Error(kModule,
                "the token buffers of one step (--batch " + str(s.run.batch_size) + " x --seq " + str(s.run.seq_tokens) +
                    " x --dp " + str(s.run.dp) + ", --grad-accum " + str(s.grad_accum) + " micro-batches + 1 for validation) need " +
                    format_bytes(static_cast<double>(bytes)) + ", more than this machine's " +
                    format_bytes(static_cast<double>(ram)) + " of memory",
                "lower --batch (gradients accumulate over --grad-accum micro-batches, which run one after another)");
}

// The options of a copy of the settings (a declaration binds to fields it may write).
struct BoundOptions {
  TrainSettings copy;
  OptionSet set{"train", ""};
  explicit BoundOptions(const TrainSettings& settings) : copy(settings) { declare_train_options(set, copy); }
};

}  // namespace

void check_runnable(const std::string& module, const pipeline::RunSpec& run) {
  int ranks = 0;
  if (!checked_mul(ranks, run.sp, run.dp))
    throw Error(module, "--sp " + str(run.sp) + " x --dp " + str(run.dp) + " ranks are more than a job can count",
                "lower --sp or --dp (the world is sp x dp ranks)");
  const std::string backend = pipeline::spelling(run.backend);
  if (run.backend == pipeline::BackendKind::cuda || run.backend == pipeline::BackendKind::cpu_guarded) {
    if (ranks > 1)
      throw Error(module, "--backend " + backend + " runs on one rank, but --sp x --dp asks for " + str(ranks) +
                              ": there is no NCCL communicator yet",
                  "use --sp 1 --dp 1 with --backend " + backend + ", or --backend cpu on several ranks");
    if (run.offload_optimizer)
      throw Error(module, "--backend " + backend + " does not offload the optimizer yet: its reduce-scatter would "
                              "read the compute tier on the host",
                  "drop --offload-optimizer (one GPU's ZeRO stages keep every state in its memory)");
  }
  if (run.mode == pipeline::Mode::fpdt_reference)
    throw Error(module, "--mode fpdt-reference is the paper's implementation, which fpdt plan predicts but fpdt " +
                            module + " does not run",
                "use --mode fpdt (ours) or --mode ulysses");
}

void check_layout_fits(const std::string& module, const pipeline::FpdtModel& model, const pipeline::RunSpec& run) {
  if (!pipeline::layout_fits_64_bits(model.layout_shape(run.seq_tokens, static_cast<int>(run.batch_size))))
    throw Error(module,
                "--seq " + str(run.seq_tokens) + " is too long for '" + model.config().name + "' at --batch " +
                    str(run.batch_size) + ": one step's buffers would take more bytes than 64-bit sizes count",
                "lower --seq or --batch (a dry run measures any length that can be laid out)");
}

FaultInjection parse_fault_injection(const std::string& text) {
  FaultInjection fault;
  if (text.empty()) return fault;
  long long step = 0, count = 1;
  char tail = 0;
  if (std::sscanf(text.c_str(), "lr-inf@%lld%c", &step, &tail) == 1 && step > 0) {
    fault.lr_inf_from_step = step;
  } else if (std::sscanf(text.c_str(), "kill-in-save@%lld%c", &step, &tail) == 1 && step > 0) {
    fault.kill_in_save_step = step;
  } else if ((std::sscanf(text.c_str(), "nan-grad@%lldx%lld%c", &step, &count, &tail) == 2 ||
              (std::sscanf(text.c_str(), "nan-grad@%lld%c", &step, &tail) == 1 && (count = 1))) &&
             step > 0 && count > 0) {
    fault.nan_grad_from_step = step;
    fault.nan_grad_steps = count;
  } else {
    throw Error(kModule, "FPDT_TEST_FAULT='" + text + "' is not a fault this build injects",
                "lr-inf@STEP, nan-grad@STEP, nan-grad@STEPxCOUNT or kill-in-save@STEP (a test hook; unset it for real runs)");
  }
  return fault;
}

void declare_train_options(OptionSet& set, TrainSettings& s) {
  namespace run = pipeline::options;
  run::model(set, s.run.model).unset_means(std::string(kDefaultModel) + "; with --resume the run's own");
  set.add("init-from", "DIR|FILE.gguf",
          "start from a Hugging Face model folder (config.json + safetensors weights) or a GGUF file (dequantized)",
          s.init_from);
  set.add("init-optimizer", "",
          "with --init-from a step folder of a run: start from its AdamW moments and update count too (a stage "
          "that continues another's optimizer)",
          s.init_optimizer);
  run::rope(set, s.rope_theta, s.rope_scaling);
  set.add("data", "DIR", "folder with train.bin and val.bin", s.data_dir);
  set.add("mixture", "DIR:W[:MIN[:MAX]],...",
          "draw training rows from these shard folders by weight W, each only from its documents of MIN..MAX tokens "
          "(0: no bound), packed (validation stays on --data's val.bin)",
          s.mixture)
      .unset_means("none");
  set.add("out", "DIR", "run folder: checkpoints (the newest two are kept), metrics.jsonl", s.out_dir);
  run::backend(set, s.run.backend);
  set.add("steps", "N", "optimizer steps", s.steps).at_least(1);
  run::batch(set, s.run.batch_size);
  run::seq(set, s.run.seq_tokens);
  run::doc_mask(set, s.run.doc_mask);
  run::doc_positions(set, s.run.doc_positions);
  set.add("grad-accum", "N", "micro-batches per step", s.grad_accum).at_least(1);
  set.add("lr", "LR", "peak learning rate", s.optimizer.lr).above(0);
  set.add("min-lr", "LR", "learning rate at the end of the cosine decay (at most --lr)", s.optimizer.min_lr).at_least(0);
  set.add("warmup", "N", "linear warmup steps", s.optimizer.warmup_steps).at_least(0);
  set.add("decay-steps", "N", "cosine decay ends at this step", s.optimizer.decay_steps).at_least(0).zero_means("--steps");
  set.add("weight-decay", "W", "AdamW decoupled weight decay (matrices and embeddings only)", s.optimizer.weight_decay)
      .at_least(0);
  set.add("beta1", "B1", "AdamW beta1", s.optimizer.beta1).at_least(0).below(1);
  set.add("beta2", "B2", "AdamW beta2", s.optimizer.beta2).at_least(0).below(1);
  set.add("grad-clip", "NORM", "max global gradient norm", s.optimizer.grad_clip).at_least(0).zero_means("off");
  set.add("max-nonfinite-steps", "N",
          "stop when N steps in a row have a non-finite loss or gradient norm (each is skipped, not applied)",
          s.max_nonfinite_steps)
      .at_least(1);
  set.add("eval-every", "N", "validate every N steps and at the end", s.eval_every).at_least(0).zero_means("only at the end");
  set.add("eval-batches", "N", "validation batches per evaluation", s.eval_batches)
      .at_least(0)
      .zero_means("no validation, no val.bin needed");
  set.add("save-every", "N", "checkpoint every N steps and at the end; only the newest two checkpoints are kept",
          s.save_every)
      .at_least(0)
      .zero_means("only at the end");
  set.add("sample-tokens", "N", "generate N tokens at the end", s.sample_tokens).at_least(0);
  set.add("prompt", "TEXT", "prompt for the sample at the end", s.sample_prompt);
  set.add("resume", "", "continue the run in --out from its latest checkpoint (its model, when --model is left out)",
          s.resume);
  set.add("overwrite", "", "start afresh in an --out that holds a run: its checkpoints and metrics are deleted",
          s.overwrite);
  set.add("seed", "N", "seed of initialisation and data order", s.seed);
  run::threads(set, s.run.threads);
  set.add("peak-gflops", "G", "peak GFLOP/s for MFU", s.peak_gflops).at_least(0).zero_means("measure");
  run::compute_mem(set, s.run.compute_mem_bytes);
  run::sp(set, s.run.sp);
  run::dp(set, s.run.dp);
  set.add("comm-timeout", "SECONDS", "end the job when a rank shows no sign of life (no heartbeat) for this long",
          s.comm_timeout_seconds)
      .above(0);
  run::mode(set, s.run.mode);
  run::chunk_tokens(set, s.run.chunk_tokens, "cut the sequence into --chunks");
  run::chunks(set, s.run.chunks);
  run::offload(set, s.run.offload);
  run::recompute(set, s.run.recompute);
  run::precision(set, s.run.precision);
  set.add("offload-mem", "BYTES", "offload-tier budget per rank", s.run.offload_mem_bytes)
      .unit(Unit::bytes)
      .at_least(0)
      .zero_means("unlimited");
  run::zero(set, s.run.zero);
  run::offload_optimizer(set, s.run.offload_optimizer);
  set.add("dry-run", "", "lay out one step's memory (no arithmetic, no data), print the tier peaks and exit",
          s.dry_run);
  set.add("schedule", "", "with --dry-run: print the FPDT schedule of a training step (each layer program once)",
          s.print_schedule);
  set.add("trace", "FILE", "write a Chrome trace (compute, copy, communication spans) to FILE", s.trace_path);
  set.add("stop-after", "N", "exit after N steps of this process (after the checkpoint due then), as a preempted job would",
          s.stop_after_steps)
      .at_least(0)
      .zero_means("off");
  set.add("preempt-signals", "SIGNALS|none",
          "signals that preempt the run: it finishes its step, saves it and exits with status 75 (--resume continues); "
          "a second one ends it at once. Under mpirun use USR1 (mpirun forwards it; TERM and INT it turns into kills)",
          s.preempt_signals);
}

void check_settings(const TrainSettings& s) {
  const BoundOptions bound(s);
  bound.set.check();
  preemption::parse_signals(s.preempt_signals);
  check_runnable(kModule, s.run);
  if (s.optimizer.min_lr > s.optimizer.lr)
    throw Error(kModule, "--min-lr " + bound.set.option("min-lr").text() + " is above --lr " + bound.set.option("lr").text(),
                "the cosine schedule decays from --lr down to --min-lr");
  if (!s.init_from.empty() && s.resume)
    throw Error(kModule, "--init-from and --resume cannot be combined",
                "--init-from starts a new run from a Hugging Face folder; to continue it, give --resume and its --out "
                "(the model comes from its checkpoint)");
  if (s.init_optimizer && (s.init_from.empty() || model::is_gguf_path(s.init_from)))
    throw Error(kModule, "--init-optimizer takes the optimizer state of the step folder --init-from names, but --init-from is " +
                             (s.init_from.empty() ? std::string("not given") : s.init_from + ", a GGUF file"),
                "give --init-from runs/X/step_N (a checkpoint of fpdt train), or drop --init-optimizer");
  if (!s.init_from.empty() && !s.run.model.empty())
    throw Error(kModule, "--init-from " + s.init_from + " brings its own model (config.json or GGUF metadata); --model " + s.run.model + " would be a second one",
                "drop --model (use --rope-theta / --rope-scaling to change the RoPE of the loaded model)");
  if (s.optimizer.warmup_steps > s.steps) {
    char last_lr[32];
    std::snprintf(last_lr, sizeof last_lr, "%.3g", learning_rate(s.optimizer, s.steps));
    throw Error(kModule,
                "--warmup " + str(s.optimizer.warmup_steps) + " is longer than the run's --steps " + str(s.steps) +
                    ": the learning rate would never reach --lr " + bound.set.option("lr").text() + " (step " +
                    str(s.steps) + " at " + last_lr + ")",
                "use a --warmup below --steps (a few percent of them), or --warmup 0");
  }
  if (s.optimizer.decay_steps > 0 && s.optimizer.decay_steps <= s.optimizer.warmup_steps)
    throw Error(kModule,
                "--decay-steps " + str(s.optimizer.decay_steps) + " is not beyond --warmup " +
                    str(s.optimizer.warmup_steps) + ": the cosine decay would end before it began, so the learning "
                    "rate would never decay",
                "give --decay-steps above --warmup (or 0: decay until --steps)");
  if (s.resume && s.overwrite)
    throw Error(kModule, "--resume and --overwrite contradict each other",
                "--resume continues the run in --out; --overwrite deletes it and starts afresh");
  if (s.run.doc_positions == pipeline::DocPositions::restart && !s.run.doc_mask)
    throw Error(kModule, "--doc-positions restart restarts positions at each document, but documents are off",
                "add --doc-mask (attention inside each document), or drop --doc-positions");
  if (!s.mixture.empty()) data::parse_mixture(s.mixture);
  pipeline::check_zero(s.run);
  pipeline::run_chunk_plan(kModule, s.run);
  if (!s.dry_run) check_batch_memory(s);  // a dry run lays out the step without data
}

nlohmann::ordered_json settings_json(const TrainSettings& settings) { return BoundOptions(settings).set.values(); }

std::vector<std::pair<std::string, std::string>> settings_rows(const TrainSettings& settings) {
  const BoundOptions bound(settings);
  std::vector<std::pair<std::string, std::string>> rows;
  for (const Option& option : bound.set.options()) rows.emplace_back(option.name(), option.text());
  return rows;
}

}  // namespace fpdt::train

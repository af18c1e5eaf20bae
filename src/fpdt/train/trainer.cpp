// The training loop (see trainer.h).
#include "fpdt/train/trainer.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"
#include "fpdt/base/timer.h"
#include "fpdt/base/trace.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/model/transformer.h"
#include "fpdt/train/checkpoint.h"
#include "fpdt/train/data_loader.h"
#include "fpdt/train/metrics.h"
#include "fpdt/train/sampler.h"
#include "fpdt/train/tokenizer.h"

namespace fpdt::train {

namespace {

constexpr const char* kModule = "train";

nlohmann::ordered_json settings_json(const TrainSettings& s) {
  return {{"model", s.model},
          {"init_from", s.init_from},
          {"rope_theta", s.rope_theta ? nlohmann::json(*s.rope_theta) : nlohmann::json(nullptr)},
          {"rope_scaling", s.rope_scaling},
          {"data_dir", s.data_dir},
          {"out_dir", s.out_dir},
          {"backend", s.backend},
          {"steps", s.steps},
          {"batch_size", s.batch_size},
          {"seq_tokens", s.seq_tokens},
          {"grad_accum", s.grad_accum},
          {"lr", s.optimizer.lr},
          {"min_lr", s.optimizer.min_lr},
          {"warmup_steps", s.optimizer.warmup_steps},
          {"decay_steps", s.optimizer.decay_steps},
          {"beta1", s.optimizer.beta1},
          {"beta2", s.optimizer.beta2},
          {"eps", s.optimizer.eps},
          {"weight_decay", s.optimizer.weight_decay},
          {"grad_clip", s.optimizer.grad_clip},
          {"eval_every", s.eval_every},
          {"eval_batches", s.eval_batches},
          {"save_every", s.save_every},
          {"sp", s.sp},
          {"dp", s.dp},
          {"mode", s.mode},
          {"chunk_tokens", s.chunk_tokens},
          {"chunks", s.chunks},
          {"offload", s.offload},
          {"recompute", s.recompute},
          {"seed", s.seed}};
}

void print_table(const model::ModelConfig& config, const TrainSettings& s, int threads, double peak_gflops,
                 const comm::Communicator& world, const pipeline::PipelineConfig& pipeline) {
  auto row = [](const std::string& key, const std::string& value) {
    char line[160];
    std::snprintf(line, sizeof line, "| %-22s | %-40s |", key.c_str(), value.c_str());
    log::info(line);
  };
  const std::string rule = "+" + std::string(24, '-') + "+" + std::string(42, '-') + "+";
  log::info(rule);
  row("model", config.name + " (" + model::model_type_name(config.type) + ")");
  row("layers / hidden / ffn", std::to_string(config.layers) + " / " + std::to_string(config.hidden) + " / " +
                                   std::to_string(config.ffn_hidden));
  row("heads / kv heads / dim", std::to_string(config.heads) + " / " + std::to_string(config.kv_heads) + " / " +
                                    std::to_string(config.head_dim));
  row("vocabulary", std::to_string(config.vocab_size));
  row("parameters", std::to_string(config.parameter_count()));
  row("positions", model::describe_rope(config));
  row("attention window", model::describe_window(config));
  row("weights", s.init_from.empty() ? "random (seed " + std::to_string(s.seed) + ")" : "from " + s.init_from);
  row("data", s.data_dir);
  row("output", s.out_dir);
  row("steps", std::to_string(s.steps));
  row("batch x seq x accum", std::to_string(s.batch_size) + " x " + std::to_string(s.seq_tokens) + " x " +
                                 std::to_string(s.grad_accum));
  char lr[96];
  std::snprintf(lr, sizeof lr, "%.2e -> %.2e (warmup %lld, cosine to %lld)", s.optimizer.lr, s.optimizer.min_lr,
                static_cast<long long>(s.optimizer.warmup_steps), static_cast<long long>(s.optimizer.decay_steps));
  row("learning rate", lr);
  char adam[96];
  std::snprintf(adam, sizeof adam, "betas %.2f/%.3f wd %.2f clip %.2f", s.optimizer.beta1, s.optimizer.beta2,
                s.optimizer.weight_decay, s.optimizer.grad_clip);
  row("AdamW", adam);
  row("backend / threads", s.backend + " / " + std::to_string(threads));
  row("ranks", std::to_string(world.size()) + " (" + world.backend() + "): sp " + std::to_string(s.sp) + " x dp " +
                   std::to_string(s.dp));
  row("mode", s.mode + (pipeline.chunk_tokens > 0 ? ", chunk " + std::to_string(pipeline.chunk_tokens) + " tokens"
                                                   : ", " + std::to_string(pipeline.chunks) + " chunk(s)"));
  row("offload / recompute", pipeline::offload_name(pipeline.offload) + " / " + s.recompute);
  char peak[48];
  std::snprintf(peak, sizeof peak, "%.1f GFLOP/s%s", peak_gflops, s.peak_gflops > 0 ? "" : " (measured)");
  row("peak", peak);
  row("compute budget", s.compute_mem_bytes > 0 ? format_bytes(static_cast<double>(s.compute_mem_bytes)) : "unlimited");
  row("seed", std::to_string(s.seed));
  log::info(rule);
}

void check_settings(const TrainSettings& s) {
  auto positive = [](int64_t value, const char* option) {
    if (value <= 0)
      throw Error(kModule, std::string(option) + " must be positive, got " + std::to_string(value));
  };
  positive(s.steps, "--steps");
  positive(s.batch_size, "--batch");
  positive(s.seq_tokens, "--seq");
  positive(s.grad_accum, "--grad-accum");
  if (s.eval_batches < 0) throw Error(kModule, "--eval-batches must be ≥ 0 (0: no validation)");
  if (s.eval_every < 0 || s.save_every < 0) throw Error(kModule, "--eval-every and --save-every must be ≥ 0");
  positive(s.sp, "--sp");
  positive(s.dp, "--dp");
  if (s.backend == "cuda")
    throw Error(kModule, "the cuda backend's kernels are built, but the model and pipeline do not keep tensors in GPU "
                         "memory yet (issue 8)",
                "train with --backend cpu");
  if (s.mode != "fpdt" && s.mode != "ulysses")
    throw Error(kModule, "unknown --mode '" + s.mode + "'", "use --mode fpdt or --mode ulysses");
  if (!(s.optimizer.lr > 0)) throw Error(kModule, "--lr must be positive");
  if (!s.init_from.empty() && s.resume)
    throw Error(kModule, "--init-from and --resume cannot be combined",
                "--resume continues a run folder of ours; --init-from starts a new run from a Hugging Face folder");
  if (!s.init_from.empty() && s.model != TrainSettings{}.model)
    throw Error(kModule, "--init-from " + s.init_from + " brings its own config.json; --model " + s.model + " would be a second one",
                "drop --model (use --rope-theta / --rope-scaling to change the RoPE of the loaded model)");
}

// The model of the run: a preset or config.json, or the --init-from folder's config.json, with the
// RoPE overrides of a context extension.
model::ModelConfig run_model(const TrainSettings& s) {
  model::ModelConfig config =
      s.init_from.empty() ? model::resolve_model(s.model) : model::load_hf_config(s.init_from + "/config.json");
  model::override_rope(config, s.rope_theta, s.rope_scaling);
  return config;
}

// This data-parallel replica's rows of a global batch (dp · B rows).
model::Batch replica_rows(const Batch& batch, int dp_index, int64_t rows) {
  const int64_t offset = dp_index * rows * batch.seq_tokens;
  return model::Batch{static_cast<int>(rows), batch.seq_tokens, batch.inputs.data() + offset,
                      batch.targets.data() + offset, nullptr};
}

// Mean validation loss over the first `batches` batches of the validation loader, which restarts
// from `start` each time so every evaluation sees the same tokens; summed over every rank.
double validation_loss(pipeline::FpdtModel& model, DataLoader& loader, const DataLoaderState& start,
                       int64_t batches, Batch& scratch, comm::Communicator& world, int dp_index, int64_t rows) {
  if (batches == 0) return -1.0;  // validation off
  loader.restore(start);
  double sums[2] = {0.0, 0.0};
  for (int64_t i = 0; i < batches; ++i) {
    loader.next(scratch);
    const model::LossStats stats = model.forward(replica_rows(scratch, dp_index, rows));
    sums[0] += stats.loss_sum;
    sums[1] += stats.count;
  }
  world.all_reduce_sum(sums, 2);
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

}  // namespace

size_t peak_rss_bytes() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, status))
    if (std::sscanf(line, "VmHWM: %zu kB", &kib) == 1) break;
  std::fclose(status);
  return kib * 1024;
}

int set_threads(int threads) {
  if (threads <= 0) threads = omp_get_num_procs();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  return threads;
}

pipeline::PipelineConfig pipeline_config(const TrainSettings& settings) {
  pipeline::PipelineConfig config;
  if (settings.mode == "ulysses") {  // the baseline: the whole sequence as one chunk, all resident
    config.chunks = 1;
    config.offload.kind = pipeline::OffloadKind::none;
    return config;
  }
  config.chunk_tokens = settings.chunk_tokens;
  config.chunks = settings.chunk_tokens > 0 ? 0 : settings.chunks;
  config.offload = pipeline::parse_offload(settings.offload);
  config.recompute = pipeline::parse_recompute(settings.recompute);
  return config;
}

TrainResult train(const TrainSettings& settings, comm::Communicator& world) {
  check_settings(settings);
  if (settings.sp * settings.dp != world.size())
    throw Error(kModule,
                "--sp " + std::to_string(settings.sp) + " x --dp " + std::to_string(settings.dp) + " = " +
                    std::to_string(settings.sp * settings.dp) + " ranks, but the job has " +
                    std::to_string(world.size()),
                "launch sp x dp ranks (mpirun -np N) or change --sp/--dp");
  const int threads = set_threads(settings.threads);
  if (settings.compute_mem_bytes > 0)
    MemoryTiers::instance().set_limit(Tier::compute, static_cast<size_t>(settings.compute_mem_bytes));
  if (settings.offload_mem_bytes > 0)
    MemoryTiers::instance().set_limit(Tier::offload, static_cast<size_t>(settings.offload_mem_bytes));
  const model::ModelConfig config = run_model(settings);
  const pipeline::PipelineConfig pipeline = pipeline_config(settings);
  pipeline::make_head_sharding(config.heads, config.kv_heads, settings.sp);  // refuse before any work
  // Ranks [d·sp, (d+1)·sp) share sequences (one SP group per data-parallel replica d).
  const int dp_index = world.rank() / settings.sp;
  std::unique_ptr<comm::Communicator> sp_group = world.split(dp_index, world.rank());
  const double peak_gflops = settings.peak_gflops > 0 ? settings.peak_gflops : measure_peak_gflops(threads);
  print_table(config, settings, threads, peak_gflops, world, pipeline);

  auto backend = kernels::make_backend(settings.backend);
  pipeline::FpdtModel model(config, *backend, *sp_group, pipeline, settings.seed);
  AdamW optimizer(model.layout(), *backend, settings.optimizer);
  if (!settings.trace_path.empty()) trace::enable(world.rank());

  TrainResult result;
  if (settings.dry_run) {
    model.dry_run(settings.seq_tokens);
    result.compute_peak_bytes = MemoryTiers::instance().usage(Tier::compute).peak_bytes;
    result.offload_peak_bytes = MemoryTiers::instance().usage(Tier::offload).peak_bytes;
    result.peak_rss_bytes = peak_rss_bytes();
    return result;
  }

  if (!settings.init_from.empty()) {
    model::HfCheckpoint(settings.init_from).load(config, model.layout(), model.params());
    log::info("weights from " + settings.init_from);
  }

  const std::string train_path = settings.data_dir + "/train.bin";
  const std::string val_path = settings.data_dir + "/val.bin";
  ShardReader train_shard(train_path);
  if (train_shard.vocab_size() > static_cast<uint32_t>(config.vocab_size))
    throw Error(kModule,
                train_path + " was tokenized for a vocabulary of " + std::to_string(train_shard.vocab_size()) +
                    ", more than the model's " + std::to_string(config.vocab_size),
                "use a model whose vocab_size covers the tokenizer");
  // Every rank reads the same global batches of dp · B rows and computes its replica's rows.
  DataLoaderConfig train_config;
  train_config.batch_size = settings.batch_size * settings.dp;
  train_config.seq_tokens = settings.seq_tokens;
  train_config.sampling = Sampling::random;
  train_config.seed = settings.seed;
  DataLoader train_loader(std::move(train_shard), train_config);
  DataLoaderConfig val_config = train_config;
  val_config.sampling = Sampling::sequential;
  DataLoader val_loader(ShardReader(val_path), val_config);
  const DataLoaderState val_start = val_loader.state();


  if (world.rank() == 0) {
    std::error_code error;
    std::filesystem::create_directories(settings.out_dir, error);
    if (error)
      throw Error(kModule, "cannot create the run directory " + settings.out_dir + ": " + error.message(),
                  "choose another --out directory or check its permissions");
  }
  world.barrier();
  int64_t step = 0;
  std::string resumed_from;
  if (settings.resume) {
    resumed_from = latest_checkpoint(settings.out_dir);
    if (!resumed_from.empty()) {
      const TrainerState state = load_checkpoint(resumed_from, config, model.layout(), model.params(), optimizer);
      step = state.step;
      train_loader.restore(state.data);
      log::info("resumed from " + resumed_from + " at step " + std::to_string(step));
    } else {
      log::info("no checkpoint in " + settings.out_dir + " yet; starting a new run");
    }
  }
  MetricsLog metrics_log;
  if (world.rank() == 0) metrics_log = MetricsLog(settings.out_dir + "/metrics.jsonl", !resumed_from.empty());

  std::vector<Batch> micro(static_cast<size_t>(settings.grad_accum));
  Batch val_scratch;
  auto validate = [&] {
    return validation_loss(model, val_loader, val_start, settings.eval_batches, val_scratch, world, dp_index,
                           settings.batch_size);
  };
  if (resumed_from.empty() && settings.eval_batches > 0) {
    result.first_val_loss = validate();
    char line[96];
    std::snprintf(line, sizeof line, "validation loss before training: %.4f", result.first_val_loss);
    log::info(line);
  }

  const double flops_per_step =
      model_flops(config, settings.batch_size * settings.grad_accum * settings.dp, settings.seq_tokens);
  Timer run_timer;
  const int64_t first_step = step + 1;
  auto save = [&](int64_t saved_step) {
    if (world.rank() == 0) {
      TrainerState state;
      state.step = saved_step;
      state.data = train_loader.state();
      state.seed = settings.seed;
      state.settings_json = settings_json(settings).dump();
      save_checkpoint(settings.out_dir, config, model.layout(), model.params(), optimizer, state);
    }
    world.barrier();
  };
  while (step < settings.steps) {
    ++step;
    Timer step_timer;
    MemoryTiers::instance().reset_peak(Tier::compute);
    MemoryTiers::instance().reset_peak(Tier::offload);
    sp_group->reset_bytes_sent();
    model.grads().zero();
    double counted = 0.0;
    for (Batch& batch : micro) {
      train_loader.next(batch);
      counted += static_cast<double>(batch.target_tokens);
    }
    double loss_sum = 0.0;
    for (const Batch& batch : micro)
      loss_sum += model.forward_backward(replica_rows(batch, dp_index, settings.batch_size),
                                         counted > 0 ? 1.0 / counted : 0.0)
                      .loss_sum;
    result.alltoall_bytes_per_step = sp_group->bytes_sent();
    if (world.size() > 1) {
      world.all_reduce_sum(model.grads().data(), static_cast<size_t>(model.grads().numel()));
      world.all_reduce_sum(&loss_sum, 1);
    }
    StepMetrics metrics;
    metrics.step = step;
    metrics.loss = counted > 0 ? loss_sum / counted : 0.0;
    metrics.grad_norm = clip_grad_norm(*backend, model.grads(), settings.optimizer.grad_clip);
    metrics.lr = learning_rate(settings.optimizer, step);
    optimizer.update(model.params(), model.grads(), metrics.lr);
    metrics.step_seconds = step_timer.seconds();
    metrics.tokens_per_second =
        static_cast<double>(settings.batch_size * settings.dp * settings.grad_accum * settings.seq_tokens) /
        metrics.step_seconds;
    metrics.gflops = flops_per_step / metrics.step_seconds * 1e-9;
    metrics.mfu = metrics.gflops / (peak_gflops * world.size());
    metrics.compute_peak_bytes = MemoryTiers::instance().usage(Tier::compute).peak_bytes;
    metrics.offload_peak_bytes = MemoryTiers::instance().usage(Tier::offload).peak_bytes;
    metrics.alltoall_bytes = result.alltoall_bytes_per_step;
    const bool last = step == settings.steps;
    if ((settings.eval_every > 0 && step % settings.eval_every == 0) || last) metrics.val_loss = validate();
    metrics_log.write(metrics);

    const double elapsed = run_timer.seconds();
    const double eta = elapsed / static_cast<double>(step - first_step + 1) * static_cast<double>(settings.steps - step);
    log::info(progress_line(metrics, settings.steps, eta));
    if (step == first_step) result.first_loss = metrics.loss;
    result.first_step = first_step;
    result.last_step = step;
    result.last_loss = metrics.loss;
    if (metrics.val_loss >= 0) result.last_val_loss = metrics.val_loss;

    if ((settings.save_every > 0 && step % settings.save_every == 0) || last) save(step);
    if (settings.stop_after_steps > 0 && step - first_step + 1 >= settings.stop_after_steps && !last) {
      log::info("stopping after " + std::to_string(settings.stop_after_steps) + " steps (--stop-after)");
      return result;
    }
  }

  result.compute_peak_bytes = MemoryTiers::instance().usage(Tier::compute).peak_bytes;
  result.offload_peak_bytes = MemoryTiers::instance().usage(Tier::offload).peak_bytes;
  result.peak_rss_bytes = peak_rss_bytes();
  if (!settings.trace_path.empty()) {
    const std::string path = world.size() > 1 ? settings.trace_path + ".rank" + std::to_string(world.rank())
                                              : settings.trace_path;
    trace::write(path);
    log::info("trace written to " + path);
  }

  if (settings.sample_tokens > 0 && world.rank() == 0) {
    // Generation runs the whole-sequence model on this rank with the trained weights.
    model::Transformer sampler(config, *backend, settings.seed);
    std::memcpy(sampler.params().data(), model.params().data(),
                sizeof(float) * static_cast<size_t>(model.params().numel()));
    ByteTokenizer tokenizer;
    SampleSettings sample;
    sample.new_tokens = settings.sample_tokens;
    sample.context_tokens = settings.seq_tokens;
    Rng rng(settings.seed + 7);
    const std::vector<int32_t> tokens = generate(sampler, tokenizer.encode(settings.sample_prompt), sample, rng);
    result.sample = tokenizer.render(tokens);
  }
  return result;
}

}  // namespace fpdt::train

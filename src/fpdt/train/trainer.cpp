// The training loop: set-up, step, evaluate, finish (see trainer.h).
#include "fpdt/train/trainer.h"

#include <unistd.h>

#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#include "fpdt/base/error.h"
#include "fpdt/base/preemption.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/log.h"
#include "fpdt/base/trace.h"
#include "fpdt/data/gguf_tokenizer.h"
#include "fpdt/data/mixture.h"
#include "fpdt/data/shard_tokenizer.h"
#include "fpdt/data/tokenizer.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/gguf.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/model/transformer.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/train/checkpoint.h"
#include "fpdt/train/rank_agreement.h"
#include "fpdt/train/dry_run.h"
#include "fpdt/train/run_sample.h"
#include "fpdt/train/run_table.h"

namespace fpdt::train {

namespace {

constexpr const char* kModule = "train";

std::string str(int64_t value) { return std::to_string(value); }

// Rows [first, first + rows) of a global batch (a replica's micro-batch), with their documents and
// positions when the batch has them.
model::Batch batch_rows(const data::Batch& batch, int64_t first, int64_t rows) {
  const int64_t offset = first * batch.seq_tokens;
  model::Batch part{static_cast<int>(rows), batch.seq_tokens, batch.inputs.data() + offset,
                    batch.targets.data() + offset, nullptr};
  if (!batch.doc_ids.empty()) part.doc_ids = batch.doc_ids.data() + offset;
  if (!batch.positions.empty()) part.positions = batch.positions.data() + offset;
  return part;
}

// A dry run started without mpirun lays out rank 0 of the world the settings ask for.
std::unique_ptr<comm::Communicator> dry_world(const TrainSettings& s, const comm::Communicator& world) {
  if (!s.dry_run || world.size() != 1 || s.run.sp * s.run.dp == 1) return nullptr;
  return comm::make_dry(s.run.sp * s.run.dp, 0);
}

// The model a run trains: the --init-from folder's config.json or GGUF file's metadata; a resumed run's
// own, its checkpoint's config.json (RoPE included), when --model is not given; else --model
// (kDefaultModel when not given). With the RoPE overrides of a context extension. A resumed run's model
// must be its checkpoint's: that is checked here, before anything is laid out (the error names the
// first field that differs).
model::ModelConfig run_model(const TrainSettings& s, const std::string& checkpoint) {
  if (model::is_gguf_path(s.init_from)) {  // --init-from excludes --resume (check_settings)
    model::ModelConfig config = model::gguf_model_config(model::GgufFile(s.init_from));
    model::override_rope(config, s.rope_theta, s.rope_scaling);
    return config;
  }
  std::string path = s.init_from.empty() ? "" : path_in(s.init_from, "config.json");
  if (!checkpoint.empty() && s.run.model.empty()) {
    path = path_in(checkpoint, "config.json");
    log::info("model: " + path + " (the run's own)");
  }
  model::ModelConfig config =
      path.empty() ? model::resolve_model(s.run.model.empty() ? kDefaultModel : s.run.model) : model::load_hf_config(path);
  model::override_rope(config, s.rope_theta, s.rope_scaling);
  if (!checkpoint.empty()) check_checkpoint_model(checkpoint, config);
  return config;
}

// An --init-from model was trained with its own tokenizer: the shards must be of that one (the one rule
// of shard_tokenizer.h). A GGUF file's is in its metadata; a folder without a tokenizer.json is the byte
// tokenizer's when its vocabulary is (checkpoint_tokenizer); else nothing shows what its ids mean.
void check_init_tokenizer(const std::string& folder, const model::ModelConfig& config, const data::ShardReader& shard) {
  if (model::is_gguf_path(folder))
    return data::check_made_by(kModule, shard, data::gguf_tokenizer(model::GgufFile(folder)), folder);
  if (!std::filesystem::exists(path_in(folder, data::kTokenizerFile)) &&
      config.vocab_size != data::Tokenizer::bytes().vocab_size())
    throw Error(kModule,
                folder + " holds no " + data::kTokenizerFile + ", so nothing says that its model (vocabulary " +
                    str(config.vocab_size) + ") was trained with the tokenizer of " + shard.path() + " (" +
                    (shard.tokenizer().fingerprint == 0 ? std::string("bytes")
                                                        : data::fingerprint_string(shard.tokenizer().fingerprint)) +
                    ", vocabulary " + std::to_string(shard.vocab_size()) + ")",
                "put the model's tokenizer.json into " + folder + " and tokenize with it: fpdt tokenize --tokenizer " +
                    folder + " --out DIR FILE...");
  data::check_made_by(kModule, shard, checkpoint_tokenizer(folder, config.vocab_size), folder);
}

// --trace FILE is written at the end of the run: a folder in its place, or a folder that is missing or
// not writable, is refused before the run starts.
void check_trace_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path))
    throw Error(kModule, "--trace " + path + " is a folder; the trace is one file",
                "give a file name, e.g. --trace " + path_in(path, "trace.json"));
  const std::string folder = fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string();
  if (!fs::is_directory(folder))
    throw Error(kModule, "--trace " + path + ": its folder " + folder + " does not exist",
                "create it, or give a path in an existing folder");
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw Error(kModule, "--trace " + path + ": cannot write into its folder " + folder + ": " + std::strerror(errno),
                "give a path in a folder you can write");
}

// The run as the pipeline and the model states take it: a disk offload without a directory goes in the
// run's folder (--out).
pipeline::RunSpec placed_run(const TrainSettings& s) {
  pipeline::RunSpec run = s.run;
  run.offload = pipeline::with_run_folder(run.offload, s.out_dir);
  return run;
}

}  // namespace


// ---- set-up ---------------------------------------------------------------------------------------

Trainer::Trainer(const TrainSettings& settings, comm::Communicator& world)
    : settings_((check_settings(settings), settings)),
      dry_world_(dry_world(settings, world)),
      world_(dry_world_ ? *dry_world_ : world) {
  check_ranks_agree(world, kModule, settings_json(settings_));  // before any other collective
  if (settings_.optimizer.decay_steps == 0) settings_.optimizer.decay_steps = settings_.steps;
  const TrainSettings& s = settings_;
  if (s.run.sp * s.run.dp != world_.size())
    throw Error(kModule,
                "--sp " + str(s.run.sp) + " x --dp " + str(s.run.dp) + " = " + str(s.run.sp * s.run.dp) + " ranks, but the job has " +
                    str(world_.size()),
                "launch sp x dp ranks (mpirun -np N) or change --sp/--dp");
  checkpoint_ = s.resume ? resume_checkpoint(s.out_dir) : "";
  config_ = run_model(s, checkpoint_);
  pipeline::make_head_sharding(config_.heads, config_.kv_heads, s.run.sp, 0);  // refuse before any work
  if (!checkpoint_.empty() && !s.dry_run) {
    const int64_t saved_step = read_trainer_state(checkpoint_).step;
    if (saved_step > s.steps)
      throw Error(kModule,
                  "cannot resume the run in " + s.out_dir + " to --steps " + str(s.steps) + ": its latest checkpoint, " +
                      checkpoint_ + ", is at step " + str(saved_step) + " already",
                  "give --steps above " + str(saved_step) + " to train it further");
    if (saved_step == s.steps) {
      complete_ = true;
      step_ = saved_step;
      log::info("the run in " + s.out_dir + " is complete: its latest checkpoint, " + checkpoint_ + ", is step " +
                str(saved_step) + " of --steps " + str(s.steps) + "; nothing to train (a larger --steps trains on)");
      return;
    }
  }
  if (!s.dry_run) {
    if (!s.trace_path.empty()) check_trace_path(s.trace_path);
    open_data();
    SampleSettings sample;  // as finish() samples
    sample.new_tokens = s.sample_tokens;
    check_trained_model_sample(config_, *tokenizer_, s.sample_prompt, sample);
    // The folder is taken only once the run can start: a refused run leaves it as it was.
    if (world_.rank() == 0)
      run_folder_ = std::make_unique<RunFolder>(s.out_dir, s.resume      ? RunStart::resume
                                                           : s.overwrite ? RunStart::overwrite
                                                                         : RunStart::fresh);
    world_.barrier();
    check_shared_run_folder(s.out_dir, world_);
  }
  build_model();
  if (s.dry_run) return;
  if (!s.init_from.empty()) {
    model::ParameterBlock whole(states_->layout(), "weights from --init-from", Tier::offload);
    if (model::is_gguf_path(s.init_from)) {
      model::load_gguf_weights(model::GgufFile(s.init_from), config_, states_->layout(), whole);
    } else {
      model::HfCheckpoint(s.init_from).load(config_, states_->layout(), whole);
      generation_config_ = model::read_generation_config(s.init_from);
    }
    states_->load_weights(whole);
    log::info("weights from " + s.init_from);
    if (s.init_optimizer)
      log::info("optimizer state from " + s.init_from + ": " +
                str(load_optimizer_state(s.init_from, *states_, *optimizer_)) + " AdamW updates");
  }
  // The step's memory and offload file, laid out before --overwrite deletes the previous run, so that
  // every refusal (a budget, the weights, the offload folder) comes first, on every rank.
  model_->reserve(s.run.seq_tokens, static_cast<int>(s.run.batch_size));
  world_.barrier();
  if (run_folder_) run_folder_->start_run();
  if (s.resume) resume();
  if (world_.rank() == 0) metrics_log_ = MetricsLog(path_in(s.out_dir, "metrics.jsonl"), step_);
  flops_per_step_ = model_flops(config_, s.run.batch_size * s.grad_accum * s.run.dp, s.run.seq_tokens);  // whole rows
  first_step_ = step_ + 1;
}

void Trainer::open_data() {
  const TrainSettings& s = settings_;
  const std::string train_path = path_in(s.data_dir, "train.bin");
  data::ShardReader train_shard(train_path);
  std::optional<data::ShardReader> val_shard;  // none without validation
  if (s.eval_batches > 0) val_shard.emplace(path_in(s.data_dir, "val.bin"));
  tokenizer_ = std::make_unique<data::Tokenizer>(
      data::shards_tokenizer(kModule, s.data_dir, train_shard, val_shard ? &*val_shard : nullptr));
  if (!s.init_from.empty()) check_init_tokenizer(s.init_from, config_, train_shard);
  if (train_shard.vocab_size() > static_cast<uint32_t>(config_.vocab_size))
    throw Error(kModule,
                train_path + " was tokenized for a vocabulary of " + std::to_string(train_shard.vocab_size()) +
                    " (its tokenizer's ids go up to " + std::to_string(train_shard.vocab_size() - 1) +
                    "), more than the model's " + str(config_.vocab_size),
                "use a model whose vocab_size covers the tokenizer");
  data::DataLoaderConfig train_config;
  train_config.batch_size = s.run.batch_size * s.run.dp * s.grad_accum;
  train_config.seq_tokens = s.run.seq_tokens;
  train_config.sampling = data::Sampling::random;
  train_config.seed = s.seed;
  train_config.documents = s.run.doc_mask;
  train_config.restart_positions = s.run.doc_positions == pipeline::DocPositions::restart;
  train_config.end_of_document = tokenizer_->end_of_document_id();  // the shards' (checked above)
  if (s.mixture.empty()) {
    train_loader_ = std::make_unique<data::DataLoader>(std::move(train_shard), train_config);
  } else {  // the rows come from the mixture's sources, made by the tokenizer of --data
    std::vector<data::MixtureSource> sources = data::parse_mixture(s.mixture);
    std::vector<data::ShardReader> shards = data::open_mixture_shards(sources);
    for (const data::ShardReader& shard : shards) data::check_made_by(kModule, shard, *tokenizer_, s.data_dir);
    train_loader_ = std::make_unique<data::MixtureLoader>(std::move(shards), std::move(sources), train_config);
  }
  if (!val_shard) return;
  data::DataLoaderConfig val_config = train_config;
  val_config.batch_size = s.run.batch_size * s.run.dp;
  val_config.sampling = data::Sampling::sequential;
  val_loader_ = std::make_unique<data::DataLoader>(std::move(*val_shard), val_config);
  val_start_ = val_loader_->state();
}

void Trainer::build_model() {
  const TrainSettings& s = settings_;
  if (s.run.compute_mem_bytes > 0) MemoryTiers::instance().set_limit(Tier::compute, static_cast<size_t>(s.run.compute_mem_bytes));
  if (s.run.offload_mem_bytes > 0) MemoryTiers::instance().set_limit(Tier::offload, static_cast<size_t>(s.run.offload_mem_bytes));
  // Ranks [d·sp, (d+1)·sp) share sequences (one SP group per data-parallel replica d).
  dp_index_ = world_.rank() / s.run.sp;
  sp_group_ = dry_world_ ? comm::make_dry(s.run.sp, world_.rank() % s.run.sp) : world_.split(dp_index_, world_.rank());
  hardware_ = machine::Hardware({s.run, s.peak_gflops, s.dry_run}, world_);
  print_run_table(config_, s, hardware_, world_);
  hardware_.log_notes();
  backend_ = kernels::make_backend(s.run.backend);
  // ZeRO shards over every rank of the world (sequence-parallel ranks hold the same weights).
  const size_t compute_before = MemoryTiers::instance().usage(Tier::compute).active_bytes;
  const size_t offload_before = MemoryTiers::instance().usage(Tier::offload).active_bytes;
  const pipeline::RunSpec run = placed_run(s);
  states_ = std::make_unique<pipeline::ModelStates>(config_, *backend_, world_, run, s.seed, s.dry_run);
  result_.state_compute_bytes = MemoryTiers::instance().usage(Tier::compute).active_bytes - compute_before;
  result_.state_offload_bytes = MemoryTiers::instance().usage(Tier::offload).active_bytes - offload_before;
  model_ = std::make_unique<pipeline::FpdtModel>(config_, *backend_, *sp_group_, run, *states_);
  check_layout_fits(kModule, *model_, s.run);
  optimizer_ = std::make_unique<AdamW>(s.optimizer);
  if (!s.trace_path.empty()) trace::enable(world_.rank());
}

void Trainer::resume() {
  const std::string& latest = checkpoint_;
  if (latest.empty()) {
    log::info("no checkpoint in " + settings_.out_dir + " yet; starting a new run");
    return;
  }
  const data::Tokenizer trained_with = checkpoint_tokenizer(latest, config_.vocab_size);
  if (trained_with.fingerprint() != tokenizer_->fingerprint())
    throw Error(kModule,
                "cannot resume " + latest + ": it was trained on shards of tokenizer " +
                    data::fingerprint_string(trained_with.fingerprint()) + ", but the shards in " + settings_.data_dir +
                    " were made by tokenizer " + data::fingerprint_string(tokenizer_->fingerprint()),
                "resume with the --data the run was trained on, or start a new --out directory");
  const TrainerState state = load_checkpoint(latest, config_, *states_, *optimizer_);
  // The arithmetic a run was trained in stays its own, as its sequence and batch do (its data loader's state).
  const std::string precision = pipeline::spelling(settings_.run.precision);
  if (state.settings.is_object() && state.settings.contains("precision") && state.settings["precision"] != precision)
    throw Error(kModule,
                "cannot resume " + latest + " in --precision " + precision + ": it was trained in " +
                    state.settings["precision"].dump(),
                "resume with --precision " + state.settings["precision"].get<std::string>() +
                    ", or start a new --out directory from it with --init-from " + latest);
  generation_config_ = model::read_generation_config(latest);
  step_ = state.step;
  train_loader_->restore(state.data);
  resumed_ = true;
  log::info("resumed from " + latest + " at step " + str(step_));
}

Trainer::~Trainer() = default;

// ---- step -----------------------------------------------------------------------------------------

StepMetrics Trainer::step() {
  const TrainSettings& s = settings_;
  ++step_;
  Timer step_timer;
  const double cpu_start = machine::process_cpu_seconds();
  MemoryTiers::instance().reset_peak(Tier::compute);
  MemoryTiers::instance().reset_peak(Tier::offload);
  sp_group_->reset_bytes_sent();
  states_->zero_gradients();
  train_loader_->next(step_batch_);
  const double counted = static_cast<double>(step_batch_.target_tokens);
  double loss_sum = 0.0;
  pipeline::OffloadTraffic traffic;
  for (int64_t micro = 0; micro < s.grad_accum; ++micro) {
    loss_sum += model_->forward_backward(batch_rows(step_batch_, (micro * s.run.dp + dp_index_) * s.run.batch_size,
                                                    s.run.batch_size),
                                         counted > 0 ? 1.0 / counted : 0.0)
                    .loss_sum;
    traffic += model_->traffic();
  }
  result_.alltoall_bytes_per_step = sp_group_->bytes_sent();
  result_.offload_per_step = traffic;
  check_update();  // the previous step's, when it overlapped this one
  const FaultInjection& fault = s.fault;
  if (fault.nan_grad_from_step > 0 && step_ >= fault.nan_grad_from_step &&
      step_ < fault.nan_grad_from_step + fault.nan_grad_steps && world_.rank() == 0)
    states_->poison_gradient();  // one rank's gradient only
  states_->reduce_gradients();
  if (world_.size() > 1) world_.all_reduce_sum(&loss_sum, 1);

  StepMetrics metrics;
  metrics.step = step_;
  metrics.loss = counted > 0 ? loss_sum / counted : 0.0;
  metrics.grad_norm = clip_grad_norm(*states_, s.optimizer.grad_clip);
  metrics.lr = learning_rate(s.optimizer, step_);
  // The loss and the norm are the all-reduced ones: every rank takes the same branch.
  metrics.skipped = !std::isfinite(metrics.loss) || !std::isfinite(metrics.grad_norm);
  if (!metrics.skipped) {
    const bool poisoned = fault.lr_inf_from_step > 0 && step_ >= fault.lr_inf_from_step;
    optimizer_->update(*states_, poisoned ? std::numeric_limits<double>::infinity() : metrics.lr);
    unchecked_update_ = Update{step_, metrics.lr, metrics.grad_norm};
    if (!states_->run().offload_optimizer) check_update();
  }
  metrics.step_seconds = step_timer.seconds();
  metrics.cpu_seconds = machine::process_cpu_seconds() - cpu_start;
  hardware_.recheck_after_step(metrics.step_seconds);
  metrics.tokens_per_second =
      static_cast<double>(s.run.batch_size * s.run.dp * s.grad_accum * s.run.seq_tokens) / metrics.step_seconds;
  if (!step_batch_.doc_ids.empty())  // --doc-mask: the step's own documents (fewer visible pairs)
    flops_per_step_ =
        model_flops(config_, s.run.batch_size * s.grad_accum * s.run.dp, s.run.seq_tokens, step_batch_.doc_ids.data());
  metrics.gflops = flops_per_step_ / metrics.step_seconds * 1e-9;
  metrics.peak_gflops = hardware_.mfu_peak_gflops();
  metrics.mfu = metrics.gflops / (metrics.peak_gflops * world_.size());
  const machine::MachineRates& fp32 = hardware_.fp32();
  if (s.run.precision == pipeline::Precision::bf16)
    metrics.fp32_mfu = metrics.gflops / (fp32.fma_peak_gflops * world_.size());
  if (fp32.sgemm_gflops > 0) metrics.sgemm_ratio = metrics.gflops / (fp32.sgemm_gflops * world_.size());
  metrics.load_average = machine::load_average();
  metrics.compute_peak_bytes = MemoryTiers::instance().usage(Tier::compute).peak_bytes;
  metrics.offload_peak_bytes = MemoryTiers::instance().usage(Tier::offload).peak_bytes;
  metrics.alltoall_bytes = result_.alltoall_bytes_per_step;
  metrics.offload_read_bytes = traffic.read_bytes;
  metrics.offload_written_bytes = traffic.written_bytes;
  return metrics;
}

void Trainer::check_update() {
  const Update update = unchecked_update_;
  if (update.step == 0) return;
  unchecked_update_ = Update{};
  if (!states_->weights_finite())
    throw Error(kModule,
                "step " + str(update.step) + "'s update made the weights non-finite (lr " + format_number(update.lr) +
                    ", gradient norm " + format_number(update.grad_norm) + "); they are not saved",
                "every checkpoint in " + settings_.out_dir +
                    " holds finite weights; lower --lr (or check the optimizer state) and --resume");
}

void Trainer::record(const StepMetrics& metrics) {
  metrics_log_.write(metrics);
  const double elapsed = run_timer_.seconds();
  const double eta =
      elapsed / static_cast<double>(step_ - first_step_ + 1) * static_cast<double>(settings_.steps - step_);
  log::info(progress_line(metrics, settings_.steps, eta));
  if (step_ == first_step_) result_.first_loss = metrics.loss;
  result_.first_step = first_step_;
  result_.last_step = step_;
  result_.last_loss = metrics.loss;
  if (metrics.val_loss >= 0) result_.last_val_loss = metrics.val_loss;

  nonfinite_in_a_row_ = metrics.skipped ? nonfinite_in_a_row_ + 1 : 0;
  result_.skipped_steps += metrics.skipped ? 1 : 0;
  if (nonfinite_in_a_row_ >= settings_.max_nonfinite_steps)
    throw Error(kModule,
                "the loss or gradient norm was not finite in " + str(nonfinite_in_a_row_) + " steps in a row (" +
                    str(step_ - nonfinite_in_a_row_ + 1) + ".." + str(step_) + ": loss " + format_number(metrics.loss) +
                    ", gradient norm " + format_number(metrics.grad_norm) + "); none of them was applied",
                "the weights are those of step " + str(step_ - nonfinite_in_a_row_) + " and every checkpoint in " +
                    settings_.out_dir + " is finite; check the data or lower --lr, then --resume");
}

// ---- evaluate -------------------------------------------------------------------------------------

double Trainer::evaluate() {
  // The validation loader restarts from the same cursor each time, so every evaluation sees the same
  // tokens; the sums are over every rank.
  if (settings_.eval_batches == 0) return -1.0;  // validation off
  check_update();
  val_loader_->restore(val_start_);
  double sums[2] = {0.0, 0.0};
  for (int64_t i = 0; i < settings_.eval_batches; ++i) {
    val_loader_->next(val_scratch_);
    const model::LossStats stats =
        model_->forward(batch_rows(val_scratch_, dp_index_ * settings_.run.batch_size, settings_.run.batch_size));
    sums[0] += stats.loss_sum;
    sums[1] += stats.count;
  }
  world_.all_reduce_sum(sums, 2);
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

void Trainer::save() {
  check_update();
  TrainerState state;
  state.step = step_;
  state.data = train_loader_->state();
  state.seed = settings_.seed;
  state.settings = settings_json(settings_);
  const bool killed = settings_.fault.kill_in_save_step == step_ && world_.rank() == world_.size() - 1;
  save_checkpoint(settings_.out_dir, {config_, *states_, *optimizer_, *tokenizer_, generation_config_}, state, world_,
                  kKeptCheckpoints, [killed] {
                    if (killed) ::raise(SIGKILL);  // the test hook: a rank dies in the middle of a sharded save
                  });
}

// ---- the run and its end --------------------------------------------------------------------------

TrainResult Trainer::run() {
  if (settings_.dry_run) return dry_run_result(*model_, *states_, settings_, world_.rank(), result_);
  if (complete_) {
    result_.first_step = result_.last_step = step_;
    result_.already_complete = true;
    return result_;
  }
  const TrainSettings& s = settings_;
  if (!resumed_ && s.eval_batches > 0) {
    result_.first_val_loss = evaluate();
    char line[96];
    std::snprintf(line, sizeof line, "validation loss before training: %.4f", result_.first_val_loss);
    log::info(line);
  }
  run_timer_.reset();
  while (!done()) {
    StepMetrics metrics = step();
    const bool last = done();
    if ((s.eval_every > 0 && step_ % s.eval_every == 0) || last) metrics.val_loss = evaluate();
    record(metrics);
    const bool save_due = (s.save_every > 0 && step_ % s.save_every == 0) || last;
    if (save_due) save();
    if (!last && preempted()) {  // the step is done: saved, the run ends; --resume continues it bitwise
      if (!save_due) save();
      result_.preempted_by = std::max(preemption::Catcher::requested(), 1);
      log::info("preempted (" + (preemption::Catcher::requested() > 0
                                     ? preemption::signal_name(preemption::Catcher::requested())
                                     : std::string("another rank")) +
                ") after step " + str(step_) + ": its checkpoint is saved; --resume continues the run");
      record_peaks();
      return result_;
    }
    if (s.stop_after_steps > 0 && step_ - first_step_ + 1 >= s.stop_after_steps && !last) {
      log::info("stopping after " + str(s.stop_after_steps) + " steps (--stop-after)");
      record_peaks();
      return result_;
    }
  }
  return finish();
}

bool Trainer::preempted() {
  float asked = preemption::Catcher::requested() != 0 ? 1.0f : 0.0f;
  if (world_.size() > 1) world_.all_reduce_sum(&asked, 1);
  return asked > 0.0f;
}

TrainResult Trainer::finish() {
  const TrainSettings& s = settings_;
  check_update();
  record_peaks();
  if (!s.trace_path.empty()) {
    const std::string path = world_.size() > 1 ? s.trace_path + ".rank" + str(world_.rank()) : s.trace_path;
    trace::write(path);
    log::info("trace written to " + path);
  }
  if (s.sample_tokens > 0) {
    SampleSettings sample;
    sample.new_tokens = s.sample_tokens;
    result_.sample = sample_trained_model(config_, *states_, *tokenizer_, s.sample_prompt, sample, s.seed, world_.rank());
  }
  return result_;
}

void Trainer::record_peaks() {
  result_.compute_peak_bytes = MemoryTiers::instance().usage(Tier::compute).peak_bytes;
  result_.offload_peak_bytes = MemoryTiers::instance().usage(Tier::offload).peak_bytes;
  result_.peak_rss_bytes = machine::peak_rss_bytes();
}

TrainResult train(const TrainSettings& settings, comm::Communicator& world) {
  // Caught from set-up to the end: a signal before the first step is taken at its end; one after the last
  // step finds the run complete and saved (it ends as it would have).
  const preemption::Catcher preemption(preemption::parse_signals(settings.preempt_signals));
  return Trainer(settings, world).run();
}

}  // namespace fpdt::train

// The training loop, in four parts: set-up (settings checked; a resume's checkpoint found, its model
// and step checked against the settings before anything is laid out; data opened; run folder taken and
// proven seen by every rank; model states, model and optimizer built; resume), step (data → forward/backward with gradient
// accumulation → gradients reduced by the ZeRO stage → non-finite guard → clipping → AdamW), evaluate
// (validation loss), finish (peaks, trace, sample); run() strings them together with metrics, periodic
// validation and checkpoints. `fpdt train` is a thin shell over train(); tests call either. A dry run
// builds everything counted, nothing allocated; in one process it lays out rank 0 of the --sp × --dp
// world it is given.
//
// Non-finite guard: a step whose loss or gradient norm (both all-reduced, so every rank decides alike)
// is not finite is skipped — its data is consumed, no update is applied — and after
// max_nonfinite_steps such steps in a row the run stops with an error. An update that makes the weights
// non-finite stops the run at once. Checkpoints are only ever written from finite weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fpdt/base/timer.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/data/data_loader.h"
#include "fpdt/data/tokenizer.h"
#include "fpdt/machine/hardware.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/train/metrics.h"
#include "fpdt/train/optimizer.h"
#include "fpdt/train/run_folder.h"
#include "fpdt/train/settings.h"

namespace fpdt::train {

// A dry run's memory, component by component (one rank): the model states' buffers, the chunk arena,
// the store's groups.
struct MemoryComponent {
  std::string name;
  std::string kind;  // "params", "grads", "optimizer", "chunk buffers", "store"
  Tier tier;
  size_t bytes;
};

// The exit status of a run that a preemption signal stopped after saving (EX_TEMPFAIL: try again, e.g. a
// requeued job with --resume).
inline constexpr int kPreemptedExitStatus = 75;

struct TrainResult {
  size_t compute_peak_bytes = 0;   // this rank, over the run (a dry run: its layout)
  size_t offload_peak_bytes = 0;
  size_t peak_rss_bytes = 0;       // the process's peak resident set (VmHWM)
  uint64_t alltoall_bytes_per_step = 0;  // sent by this rank in its sequence-parallel group (last step)
  // What building the model states added to each tier (memory_layout.h's model-state table; a dry run
  // counts it). Exact with one process per rank; thread ranks share the tiers' counters.
  size_t state_compute_bytes = 0;
  size_t state_offload_bytes = 0;
  pipeline::OffloadTraffic offload_per_step;  // this rank's offload-tier traffic (last step; a dry run: its
                                              // schedule's, without document ids)
  int64_t first_step = 0;     // first step this process ran
  int64_t last_step = 0;
  double first_loss = 0.0;    // training loss of first_step
  double last_loss = 0.0;
  double first_val_loss = -1.0;  // validation loss before training (fresh runs only), else < 0
  double last_val_loss = -1.0;
  int64_t skipped_steps = 0;  // steps of this process whose update was skipped (non-finite)
  bool already_complete = false;  // --resume of a run whose latest checkpoint is step --steps: nothing ran
  int preempted_by = 0;       // the signal that preempted the run after last_step, saved (0: not preempted)
  std::string sample;         // generated text, when sample_tokens > 0
  std::vector<MemoryComponent> memory;  // a dry run's layout
  pipeline::ChunkPlan chunk_plan;         // a dry run's: this rank's chunks of the sequence
  // A dry run's: every sequence-parallel rank's heads, arena and store (they differ when P does not divide
  // the heads, pipeline/ulysses.h) and its tiers' peaks — this rank's above, shifted by the layout's difference.
  struct SpRank {
    pipeline::RankLayout layout;
    size_t compute_peak_bytes = 0, offload_peak_bytes = 0;
  };
  std::vector<SpRank> sp_ranks;
};

class Trainer {
 public:
  // Set-up on every rank of `world` (rank 0 takes the run folder, logs and saves). A dry run builds
  // the model only. Throws fpdt::Error.
  Trainer(const TrainSettings& settings, comm::Communicator& world);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The whole run: validation before training (fresh runs), steps until --steps (validating and
  // saving on schedule; --stop-after ends early), finish. A dry run lays out one step instead.
  TrainResult run();

  // One optimizer step, or a skipped one (metrics.skipped) when its loss or gradient norm is not
  // finite. Throws fpdt::Error when the update made the weights non-finite.
  StepMetrics step();
  // Mean validation loss over eval_batches batches (the same ones each time); < 0 when switched off.
  double evaluate();
  // Checkpoint of the current step (collective: rank 0 writes the weights, each rank its optimizer shard).
  void save();
  // Peaks, the trace file and the sample of a finished run.
  TrainResult finish();
  // The tiers' peaks (of the last step) and the process's into the result: at the end, or at --stop-after.
  void record_peaks();

  bool done() const { return step_ >= settings_.steps; }
  // Whether any rank was asked to stop (a preemption signal; collective: every rank answers alike).
  bool preempted();

 private:
  // Set-up, in order: the data loaders; the model, optimizer and their ranks; the latest checkpoint.
  void open_data();
  void build_model();
  void resume();
  // Logs a step's metrics and folds them into the result; throws after too many skipped steps in a row.
  void record(const StepMetrics& metrics);

  TrainSettings settings_;  // optimizer.decay_steps resolved (0 → steps)
  std::unique_ptr<comm::Communicator> dry_world_;  // a dry run's world in one process (comm::make_dry)
  comm::Communicator& world_;
  model::ModelConfig config_;
  int dp_index_ = 0;  // this rank's data-parallel replica
  std::unique_ptr<comm::Communicator> sp_group_;
  machine::Hardware hardware_;  // its team and the peaks MFU divides by, found at set-up
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<pipeline::ModelStates> states_;
  std::unique_ptr<pipeline::FpdtModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  // Data (not for a dry run). Every rank reads the same global batches: dp · B · grad_accum rows a step
  // (micro-batch m of replica d: rows [(m·dp + d)·B, +B)), dp · B a validation batch.
  std::unique_ptr<data::BatchSource> train_loader_;  // --data's train.bin, or the --mixture
  std::unique_ptr<data::DataLoader> val_loader_;
  std::unique_ptr<data::Tokenizer> tokenizer_;  // the shards' (checked against them), saved with every checkpoint
  std::string generation_config_;  // generation_config.json of --init-from (or the resumed checkpoint), carried
                                   // into every checkpoint ("": none)
  data::DataLoaderState val_start_{};
  data::Batch step_batch_;
  data::Batch val_scratch_;
  // Rank 0: the run folder and the metrics log.
  std::unique_ptr<RunFolder> run_folder_;
  MetricsLog metrics_log_;
  std::string checkpoint_;   // the checkpoint --resume continues ("": none, a new run)
  bool complete_ = false;    // that checkpoint is step --steps: nothing to do
  bool resumed_ = false;
  int64_t step_ = 0;        // steps completed (the last one may have been skipped)
  int64_t first_step_ = 1;  // the first step this process runs
  int64_t nonfinite_in_a_row_ = 0;
  // The last update, until its weights are known to be finite (at once, or — the optimizer offloaded,
  // its update overlapping the next step — once that step's passes are done, or before the weights are
  // evaluated, saved or sampled).
  struct Update {
    int64_t step = 0;  // 0: none unchecked
    double lr = 0.0, grad_norm = 0.0;
  } unchecked_update_;
  void check_update();
  double flops_per_step_ = 0.0;  // model_flops of the step (with --doc-mask, recounted from each step's documents)
  Timer run_timer_;
  TrainResult result_;
};

// Trains on `world` (all ranks call it; rank 0 logs, saves and samples): Trainer(settings, world).run().
TrainResult train(const TrainSettings& settings, comm::Communicator& world);


}  // namespace fpdt::train

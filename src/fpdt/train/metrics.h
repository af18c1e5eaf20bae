// Training metrics: model FLOPs and MFU (against the machine's rates measured in the same run,
// machine/rates.h), a JSON-lines log (one object per step), and the terminal progress line with an ETA.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "fpdt/model/config.h"

namespace fpdt::train {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0.0;           // mean training loss of the step (nats per token)
  double val_loss = -1.0;      // mean validation loss when evaluated this step, else < 0
  double lr = 0.0;
  double grad_norm = 0.0;      // before clipping
  bool skipped = false;        // the loss or gradient norm was not finite: the update was not applied
  double step_seconds = 0.0;
  double cpu_seconds = 0.0;    // the process's CPU time over the step (all threads): its work, whatever else runs
  double tokens_per_second = 0.0;
  double gflops = 0.0;         // model GFLOP/s (see model_flops)
  double mfu = 0.0;            // gflops / the peak of the run's precision: fp32 the FMA peak (machine::MachineRates),
                               // bf16 the bf16 peak (machine::Bf16Rates::peak_gflops; the FMA peak without bf16 units)
  double fp32_mfu = 0.0;       // a bf16 run's gflops / the fp32 FMA peak, beside mfu; 0 in an fp32 run
  double peak_gflops = 0.0;    // what mfu divided by, per rank (a measured FMA peak rises when re-measured higher)
  double sgemm_ratio = 0.0;    // gflops / sgemm rate (machine::MachineRates); 0 when not measured
  double load_average = -1.0;  // 1-minute load average at the end of the step (< 0: unknown)
  size_t compute_peak_bytes = 0;
  size_t offload_peak_bytes = 0;
  uint64_t alltoall_bytes = 0;  // sent by this rank to the others of its sequence-parallel group
  uint64_t offload_read_bytes = 0;     // fetched from this rank's offload tier (0 with --offload none)
  uint64_t offload_written_bytes = 0;  // written to it
};

// Model FLOPs of one training step over `sequences` rows of `seq_tokens` tokens:
//   6 · (non-embedding parameters + LM head) · tokens + 12 · Hq · D · Σ_layers (visible query-key pairs)
// A row of S tokens has S²/2 visible pairs under the causal mask (causal attention counted once, the
// convention of FlashAttention's and this project's figures), S·W − W²/2 in a layer whose sliding window W
// is shorter, and the same per document under document masks (doc_ids (sequences, seq_tokens): each row's
// documents numbered in order; null: none). Recomputation is never counted. For the tied head the LM head's
// V·h is added explicitly, since it is not in the non-embedding count.
double model_flops(const model::ModelConfig& config, int64_t sequences, int64_t seq_tokens,
                   const int32_t* doc_ids = nullptr);

// Appends one JSON object per line ({"step": N, ...}); flushes each line so a killed run keeps what it
// logged. Non-finite numbers are written as null.
class MetricsLog {
 public:
  MetricsLog() = default;
  // Opens the log keeping the lines of steps 1 .. keep_through_step only (a resumed run logs the steps
  // after its checkpoint again, so each step is in the log once; 0: a new log). A torn last line of a
  // killed writer is dropped too. Throws fpdt::Error naming the path when it cannot be written.
  MetricsLog(const std::string& path, int64_t keep_through_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  MetricsLog& operator=(MetricsLog&& other) noexcept;
  void write(const StepMetrics& metrics);

 private:
  std::FILE* file_ = nullptr;
};

// "step  120/600 [=====>      ] loss 1.934 val 1.981 | lr 2.9e-03 | gnorm 0.81 | 5.1k tok/s | 61.2 GFLOP/s |
//  MFU 31% (sgemm 40%) | load 1.2 | mem 181.25 MiB | ETA 3m12s", and "| SKIPPED: ..." after a skipped step
std::string progress_line(const StepMetrics& metrics, int64_t total_steps, double eta_seconds);
// A time left: "12m05s" below 100 hours, then "340h12m"; beyond kLongestEtaSeconds (a run of --steps no one
// waits for) a bound, not a figure; "?" when not known.
inline constexpr double kLongestEtaSeconds = 1e12;  // ~31,700 years
std::string format_eta(double seconds);

}  // namespace fpdt::train

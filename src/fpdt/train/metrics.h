// Training metrics: model FLOPs and MFU, the machine's rates measured in the same run (the FMA peak of
// its widest vectors and the OpenBLAS sgemm rate), the load average, a JSON-lines log (one object per
// step), and the terminal progress line with an ETA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
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
  double mfu = 0.0;            // gflops / the peak of the run's precision: fp32 the FMA peak (MachineRates),
                               // bf16 the bf16 peak (Bf16Rates::peak_gflops; the FMA peak without bf16 units)
  double fp32_mfu = 0.0;       // a bf16 run's gflops / the fp32 FMA peak, beside mfu; 0 in an fp32 run
  double peak_gflops = 0.0;    // what mfu divided by, per rank (a measured FMA peak rises when re-measured higher)
  double sgemm_ratio = 0.0;    // gflops / sgemm rate (MachineRates); 0 when not measured
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

// The fp32 rates of `threads` cores, measured here and now, each per second of the CPU time the cores
// ran (not of wall time), so that other work on a shared machine cannot lower them (the load average is
// taken with them):
//   fma_peak_gflops: each thread runs independent FMA chains on the widest vectors the CPU has, whatever
//     the build targets (AVX-512: 16 lanes; else AVX2: 8), ~50 ms, best of 5 — lanes × 2 flops × FMA
//     ports per cycle at the clock the cores reach. MFU is measured against it; a training run takes one
//     trial more after each step of a second or more and keeps the higher (Trainer::recheck_fma_peak).
//   sgemm_gflops: OpenBLAS sgemm C (1024 × 1024) = A · B on the cpu backend's GEMM path (every thread of
//     the OpenMP team), best of 5 — what the model's GEMMs can reach, the practical ceiling.
struct MachineRates {
  double fma_peak_gflops = 0.0;
  int vector_bits = 0;          // of the FMA peak: 512 or 256
  double sgemm_gflops = 0.0;
  double load_average = -1.0;   // 1-minute, when measured
  std::string peak_stated_for;  // --backend cuda: the GPU whose stated fp32 peak fma_peak_gflops is
};
MachineRates measure_machine_rates(int threads);

// The bf16 rates of `threads` cores, measured as the fp32 ones are (per second of the cores' CPU time,
// best of 5, ~50 ms a trial), for bf16 runs' MFU:
//   dot_peak_gflops: AVX512-BF16 dot products (vdpbf16ps: 16 lanes × a pair of bf16 products into fp32),
//     independent chains per thread; 0 on a CPU without AVX512-BF16.
//   amx_peak_gflops: AMX-BF16 tile products (tdpbf16ps: a 16 × 32 bf16 tile times a 32 × 16 one into a
//     16 × 16 fp32 tile), four independent accumulator tiles per thread; 0 on a CPU without AMX or when
//     Linux refuses the tile state (arch_prctl ARCH_REQ_XCOMP_PERM).
//   fma_peak_gflops: the fp32 FMAs' (measure_fma_peak_gflops, measured by the caller for fp32's MFU and
//     given here, so that both MFUs divide by one figure), which multiply bf16 values exactly: the cpu
//     backend's bf16 GEMMs run on them where the bf16 units are not faster (kernels/cpu/gemm.h).
//   gemm_gflops: the cpu backend's bf16 linear_forward C (1024 × 1024) = A · Bᵀ, B given as its bf16
//     words (a weight's working copy) and A rounded per call — what the model's bf16 GEMMs reach, on
//     whichever unit gemm.h's rule runs them.
// peak_gflops() is what bf16 MFU divides by: the fastest of the three, the unit a bf16 product can best run
// on here (AMX on Sapphire Rapids and later; AVX512-BF16 on AMD's Zen 4 and 5, at twice the FMAs' FLOP rate;
// the FMAs on Intel's AVX512-BF16 without AMX, whose dot products run at half their rate, and on a CPU with
// no bf16 units).
struct Bf16Rates {
  double dot_peak_gflops = 0.0;
  double amx_peak_gflops = 0.0;
  double fma_peak_gflops = 0.0;
  double gemm_gflops = 0.0;
  double peak_gflops() const { return std::max({dot_peak_gflops, amx_peak_gflops, fma_peak_gflops}); }
  const char* peak_unit() const {  // "AMX-BF16", "AVX512-BF16", "fp32 FMA" or "" (none measured)
    const double peak = peak_gflops();
    if (peak <= 0) return "";
    return peak == amx_peak_gflops ? "AMX-BF16" : peak == dot_peak_gflops ? "AVX512-BF16" : "fp32 FMA";
  }
};
Bf16Rates measure_bf16_rates(int threads, double fma_peak_gflops);
double measure_bf16_dot_peak_gflops(int threads);
double measure_amx_bf16_peak_gflops(int threads);
double measure_bf16_gemm_gflops(int threads);

// A GPU's dense peaks as its vendor states them, found by the name its driver reports (cuda_device_name):
// MFU on --backend cuda divides by fp32_gflops (fpdt's CUDA kernels compute in fp32, no TF32); bf16 is
// there for the bf16 kernels to come. nullopt for a GPU not listed (then --peak-gflops gives the figure).
struct DevicePeak {
  std::string device;  // as listed: "NVIDIA H200 (SXM)"
  double fp32_gflops = 0.0;
  double bf16_gflops = 0.0;
};
std::optional<DevicePeak> stated_device_peak(const std::string& device_name);
double measure_fma_peak_gflops(int threads, int* vector_bits = nullptr, int trials = 5);
double measure_sgemm_gflops(int threads);

// The 1-minute load average (/proc/loadavg); -1 when it cannot be read.
double load_average();

// CPU time the process has used so far, all threads (user + system).
double process_cpu_seconds();

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

}  // namespace fpdt::train

// The machine's measured rates: the FMA peak of its widest vectors, the bf16 units' peaks (AVX512-BF16,
// AMX), the cpu backend's sgemm and bf16 GEMM rates, each per second of CPU time; a GPU's stated peaks;
// the load average. What MFU divides by (train), what `fpdt plan` calls this machine's peak.
#pragma once

#include <algorithm>
#include <optional>
#include <string>

namespace fpdt::machine {

// The fp32 rates of `threads` cores, measured here and now, each per second of the CPU time the cores
// ran (not of wall time), so that other work on a shared machine cannot lower them (the load average is
// taken with them):
//   fma_peak_gflops: each thread runs independent FMA chains on the widest vectors the CPU has, whatever
//     the build targets (AVX-512: 16 lanes; else AVX2: 8), ~50 ms, best of 5 — lanes × 2 flops × FMA
//     ports per cycle at the clock the cores reach. MFU is measured against it; a training run takes one
//     trial more after each step of a second or more and keeps the higher (Hardware::recheck_after_step).
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

}  // namespace fpdt::machine

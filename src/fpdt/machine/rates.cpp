// The micro-benchmarks behind rates.h: FMA chains, bf16 dot products and AMX tile products (each
// compiled for its instruction set on the function itself, called only where the CPU has it), and the
// cpu backend's GEMMs.
#include "fpdt/machine/rates.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <ctime>
#include <vector>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/panel_gemm_amx.h"
#include "fpdt/tensor/dtype.h"

namespace fpdt::machine {

namespace {

// Independent FMA chains per thread: enough to cover the FMA latency (4 cycles) on 2 ports, with the
// accumulators kept in registers (16 of the 32 zmm; 12 of the 16 ymm). Each returns its flops; the
// result is stored to a volatile so the loop is not optimised away. Compiled for AVX-512 whatever the
// build targets (the intrinsics need the target on the function itself); called only where the CPU has it.
__attribute__((target("avx512f"))) double fma_flops_avx512(int64_t iterations) {
  constexpr int kChains = 16;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.01f * i);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  volatile float sink = lanes[0];
  (void)sink;
  return static_cast<double>(iterations) * kChains * 16 * 2;
}

__attribute__((target("avx2,fma"))) double fma_flops_avx2(int64_t iterations) {
  constexpr int kChains = 12;
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(1.0f + 0.01f * i);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  volatile float sink = lanes[0];
  (void)sink;
  return static_cast<double>(iterations) * kChains * 8 * 2;
}

// bf16 dot products: 16 chains of vdpbf16ps (each 16 lanes × 2 products, 64 flops). a · b is tiny, so the
// sums stay far from overflow over the trial.
__attribute__((target("avx512f,avx512bf16"))) double bf16_dot_flops(int64_t iterations) {
  constexpr int kChains = 16;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.01f * i);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(1e-4f));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  volatile float sink = lanes[0];
  (void)sink;
  return static_cast<double>(iterations) * kChains * 16 * 2 * 2;
}

// AMX tile products: C tiles 0–3 (16 × 16 fp32) += A tiles 4–5 (16 × 32 bf16) · B tiles 6–7 (32 × 16
// bf16, in AMX's pair-interleaved layout), four independent accumulators; each tdpbf16ps is
// 16 · 16 · 32 products, 16384 flops. The calling thread configures the tiles (kernels/cpu/panel_gemm_amx.h)
// and releases them.
__attribute__((target("amx-tile,amx-bf16"))) double amx_bf16_flops(int64_t iterations) {
  alignas(64) uint16_t operand[16 * 32];
  const uint16_t small = fpdt::float_to_bf16(1e-3f);
  for (uint16_t& v : operand) v = small;
  alignas(64) float result[16 * 16] = {};
  kernels::cpu::amx_configure_tiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, result, 64);
  kernels::cpu::amx_release_tiles();
  volatile float sink = result[0];
  (void)sink;
  return static_cast<double>(iterations) * 4 * 16 * 16 * 32 * 2;
}

// The best of `trials` rates that `trial` returns (GFLOP/s): the machine is shared and noisy.
template <typename Trial>
double best_of(int trials, const Trial& trial) {
  double best = 0.0;
  for (int k = 0; k < trials; ++k) best = std::max(best, trial());
  return best;
}

// Seconds on `clock`: the calling thread's CPU time, or the whole process's.
double clock_seconds(clockid_t clock) {
  timespec now{};
  clock_gettime(clock, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

double thread_cpu_seconds() { return clock_seconds(CLOCK_THREAD_CPUTIME_ID); }

// A peak: each thread of the team runs `flops_of(iterations)` and its rate per second of its own CPU time
// counts; the sum over the team, best of `trials`.
template <typename Flops>
double measure_team_peak(int threads, int64_t iterations, const Flops& flops_of, int trials = 5) {
  return best_of(trials, [&] {
    double gflops = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : gflops)
    {
      const double start = thread_cpu_seconds();
      const double flops = flops_of(iterations);
      gflops += flops / (thread_cpu_seconds() - start) * 1e-9;
    }
    return gflops;
  });
}

}  // namespace

// Both rates are of the cores while they run — flops per second of CPU time, not of wall time — so
// another process holding a core cannot lower them: timed by the wall, a peak measured while a build
// ran beside the job came out half the real one, and the steps after it read MFU 109 %.
double measure_fma_peak_gflops(int threads, int* vector_bits, int trials) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (vector_bits) *vector_bits = avx512 ? 512 : 256;
  // ~50 ms a trial at 3.6 GHz (2 FMA per cycle). Each thread's rate per second of its own CPU time, summed
  // over the team.
  const int64_t iterations = avx512 ? 24'000'000 : 32'000'000;
  return measure_team_peak(threads, iterations, avx512 ? fma_flops_avx512 : fma_flops_avx2, trials);
}

namespace {

// c (kN, kN) = a (kN, kN) · bᵀ: the linear layer's product on the cpu backend's GEMM path in `precision`,
// best of 5 after a warm-up (page faults, library buffers, oneDNN's primitive); the process's CPU seconds
// over it are the team's (threads · the seconds each ran).
double measure_linear_gflops(int threads, kernels::Precision precision) {
  constexpr int kN = 1024;  // 12 MiB of operands: near the large-matrix rate, little resident memory
  std::vector<float> a(size_t{kN} * kN), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 1e-3f;
    b[i] = static_cast<float>(i % 5) * 1e-3f;
  }
  kernels::cpu::CpuBackend backend;
  const int previous = omp_get_max_threads();
  omp_set_num_threads(threads);
  // bf16: B is a weight, read as a bf16 run reads it — its working copy's words, made once (model_states.h).
  std::vector<uint16_t> b_words(precision == kernels::Precision::bf16 ? b.size() : 0);
  if (!b_words.empty()) backend.pack_bf16(b_words.data(), b.data(), static_cast<int64_t>(b.size()));
  const kernels::WeightMatrix w(b.data(), b_words.empty() ? nullptr : b_words.data());
  auto gemm = [&] {
    const double start = process_cpu_seconds();
    backend.linear_forward(c.data(), a.data(), w, nullptr, kN, kN, kN, false, precision);
    return 2.0 * kN * kN * kN / (process_cpu_seconds() - start) * threads * 1e-9;
  };
  gemm();
  const double rate = best_of(5, gemm);
  omp_set_num_threads(previous);
  return rate;
}

}  // namespace

double measure_sgemm_gflops(int threads) { return measure_linear_gflops(threads, kernels::Precision::fp32); }

double measure_bf16_gemm_gflops(int threads) { return measure_linear_gflops(threads, kernels::Precision::bf16); }

double measure_bf16_dot_peak_gflops(int threads) {
  if (!__builtin_cpu_supports("avx512bf16")) return 0.0;
  // ~50 ms a trial at 3 GHz, one vdpbf16ps a cycle.
  return measure_team_peak(threads, 10'000'000, bf16_dot_flops);
}

double measure_amx_bf16_peak_gflops(int threads) {
  if (!kernels::cpu::amx_tiles_supported()) return 0.0;
  // ~50 ms a trial at 2 GHz, one tdpbf16ps every 16 cycles.
  return measure_team_peak(threads, 1'500'000, amx_bf16_flops);
}

Bf16Rates measure_bf16_rates(int threads, double fma_peak_gflops) {
  Bf16Rates rates;
  rates.fma_peak_gflops = fma_peak_gflops;
  rates.dot_peak_gflops = measure_bf16_dot_peak_gflops(threads);
  rates.amx_peak_gflops = measure_amx_bf16_peak_gflops(threads);
  rates.gemm_gflops = measure_bf16_gemm_gflops(threads);
  return rates;
}

double load_average() {
  std::FILE* file = std::fopen("/proc/loadavg", "r");
  if (file == nullptr) return -1.0;
  double load = -1.0;
  if (std::fscanf(file, "%lf", &load) != 1) load = -1.0;
  std::fclose(file);
  return load;
}

double process_cpu_seconds() { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

MachineRates measure_machine_rates(int threads) {
  MachineRates rates;
  rates.load_average = load_average();
  rates.fma_peak_gflops = measure_fma_peak_gflops(threads, &rates.vector_bits);
  rates.sgemm_gflops = measure_sgemm_gflops(threads);
  return rates;
}

// NVIDIA's datasheets (dense; the bf16 Tensor Core figures they print are with 2:4 sparsity, twice
// these). A name's more specific variant comes before it ("H200 NVL" before "H200").
std::optional<DevicePeak> stated_device_peak(const std::string& device_name) {
  static const std::pair<const char*, DevicePeak> kListed[] = {
      {"H200 NVL", {"NVIDIA H200 NVL", 60e3, 835.5e3}},
      {"H200", {"NVIDIA H200 (SXM)", 67e3, 989.5e3}},
      {"H100 NVL", {"NVIDIA H100 NVL", 60e3, 835.5e3}},
      {"H100 PCIe", {"NVIDIA H100 PCIe", 51e3, 756e3}},
      {"H100", {"NVIDIA H100 (SXM)", 67e3, 989.5e3}},
      {"A100", {"NVIDIA A100", 19.5e3, 312e3}},
  };
  for (const auto& [part, peak] : kListed)
    if (device_name.find(part) != std::string::npos) return peak;
  return std::nullopt;
}

}  // namespace fpdt::machine

// The machine's measured rates (machine/rates.h), MFU's denominators in bf16: each runs and gives a rate
// the CPU can have.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "fpdt/kernels/cpu/blas_core.h"
#include "fpdt/machine/rates.h"

namespace fpdt::machine {
namespace {

// The bf16 measurements on one thread: a unit the CPU has gives a positive rate, one it lacks exactly 0,
// and no rate exceeds what one core could do at 6 GHz — 2 vdpbf16ps a cycle (128 flops), one tdpbf16ps
// per 16 cycles with the products' 32 Ki flops rounded up to 2048 a cycle — nor the bf16 GEMM more than the
// fastest of those and the fp32 FMAs (which run it where the bf16 units are not faster), with 25 % for the
// noise of best-of-5 figures on a shared machine; the peak MFU divides by is the fastest. Bounds of physics,
// not timings: a broken loop or a lost factor of 2 in a flop count falls outside them.
TEST(MachineRates, Bf16PeaksAndGemmAreMeasuredAndPhysical) {
  constexpr double kMaxGhz = 6.0;
  const Bf16Rates rates = measure_bf16_rates(1, measure_fma_peak_gflops(1));
  const bool has_dot = __builtin_cpu_supports("avx512bf16");
  const bool has_amx = kernels::cpu::cpu_has_amx_bf16();
  std::printf("[ rates    ] AVX512-BF16 %.1f GFLOP/s, AMX-BF16 %.1f, fp32 FMA %.1f, bf16 GEMM %.1f (1 thread)\n",
              rates.dot_peak_gflops, rates.amx_peak_gflops, rates.fma_peak_gflops, rates.gemm_gflops);
  if (has_dot) {
    EXPECT_GT(rates.dot_peak_gflops, 0.0);
  } else {
    EXPECT_EQ(rates.dot_peak_gflops, 0.0);
  }
  if (!has_amx) {
    EXPECT_EQ(rates.amx_peak_gflops, 0.0);
  } else {
    EXPECT_GE(rates.amx_peak_gflops, 0.0);  // Linux may refuse the tile state: then 0
  }
  EXPECT_LE(rates.dot_peak_gflops, kMaxGhz * 128);
  EXPECT_LE(rates.amx_peak_gflops, kMaxGhz * 2048);
  EXPECT_GT(rates.fma_peak_gflops, 0.0);
  EXPECT_LE(rates.fma_peak_gflops, kMaxGhz * 64);  // 2 FMAs of 16 lanes a cycle
  EXPECT_GT(rates.gemm_gflops, 0.0);
  EXPECT_LE(rates.gemm_gflops, 1.25 * rates.peak_gflops());
  const double fastest = std::max({rates.dot_peak_gflops, rates.amx_peak_gflops, rates.fma_peak_gflops});
  EXPECT_EQ(rates.peak_gflops(), fastest);
  EXPECT_STREQ(rates.peak_unit(), fastest == rates.amx_peak_gflops   ? "AMX-BF16"
                                  : fastest == rates.dot_peak_gflops ? "AVX512-BF16"
                                                                     : "fp32 FMA");
}

}  // namespace
}  // namespace fpdt::machine

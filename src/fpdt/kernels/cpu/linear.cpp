// Fast linear layer (semantics: reference/linear.h; w is (out, in)), fp32 or bf16. Every product is one
// GEMM of cpu/gemm.h on the OpenMP team; the bias is written (or added) before the forward GEMM, which
// then accumulates. bf16: the products' operands are made by gemm.h's bf16_operand for the unit that runs
// them here — bf16 words for oneDNN's bf16 kernels, or their values as floats for the fp32 FMAs — w as
// its words where the WeightMatrix carries them (the run's working copy, made once per update; the FMAs
// widen them block by block), x, dout and a w given only as values rounded per call (nearest-even: the
// spec's rounding) into the thread's scratch; the products sum in fp32. dbias sums the fp32 dout's columns
// in double, column blocks across threads. The only heap memory is the GEMM layer's scratch, grown once
// per thread.
#include <cblas.h>
#include <pmmintrin.h>

#include <algorithm>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/gemm.h"

namespace fpdt::kernels::cpu {

namespace {

constexpr int64_t kParallelMinElements = int64_t{1} << 15;  // below this a thread team costs more than it saves
constexpr int kColumnBlock = 128;                            // columns per block in the dbias pass (1 KiB of doubles)

// dbias (O) += Σ_n dout[n]   (dout (N, O))
void accumulate_column_sums(float* dbias, const float* dout, int64_t N, int O) {
  const int blocks = (O + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (N * O >= kParallelMinElements)
  for (int block = 0; block < blocks; ++block) {
    const int o0 = block * kColumnBlock;
    const int width = std::min(kColumnBlock, O - o0);
    double acc[kColumnBlock];
    for (int o = 0; o < width; ++o) acc[o] = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      const float* dout_row = dout + n * O + o0;  // (width)
      for (int o = 0; o < width; ++o) acc[o] += dout_row[o];
    }
    for (int o = 0; o < width; ++o) dbias[o0 + o] = static_cast<float>(dbias[o0 + o] + acc[o]);
  }
}

// Scratch slots of the bf16 operands (gemm.h's bf16_operand).
enum Slot { kX = 0, kW = 1, kDout = 2 };

// w (O, I) as a bf16 operand: its working copy's words, else rounded from its values now.
Bf16Operand bf16_weights(const WeightMatrix& w, int I, int O) {
  return w.bf16 != nullptr ? Bf16Operand{w.bf16, nullptr} : bf16_operand(kW, w.values, static_cast<int64_t>(O) * I);
}

// Subnormal floats (magnitude below 2^-126) read and written as zero — MXCSR's DAZ and FTZ — on this
// thread and every thread of its OpenMP team; a thread the team adds later is made by this one and
// inherits the mode. Without it a trained model's steps slow several-fold: as attention sharpens, the
// probabilities of far keys (and the products they enter: P·V, dS) fall into the subnormal range, where
// each operation takes a microcode assist of ~100 cycles (bench/RESULTS.md, "bf16 beside fp32 over 200
// steps"). The reference values the kernels are held to differ by less than 2^-126 per value.
void flush_subnormals_to_zero() {
#pragma omp parallel
  {
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  }
}

}  // namespace

CpuBackend::CpuBackend() {
  openblas_set_num_threads(1);
  flush_subnormals_to_zero();
}

// Dimensions go to the GEMMs as 32-bit ints: a chunk's token count N stays far below 2^31.
void CpuBackend::linear_forward(float* out, const float* x, WeightMatrix w, const float* bias, int64_t N, int I, int O,
                                bool accumulate, Precision precision) {
  if (N == 0 || O == 0) return;
  if (bias) {
#pragma omp parallel for schedule(static) if (N * O >= kParallelMinElements)
    for (int64_t n = 0; n < N; ++n) {
      float* out_row = out + n * O;  // (O)
      if (accumulate) {
        for (int o = 0; o < O; ++o) out_row[o] += bias[o];
      } else {
        for (int o = 0; o < O; ++o) out_row[o] = bias[o];
      }
    }
    accumulate = true;
  }
  // out (N, O) = x (N, I) · w^T (I, O) (+ out)
  const int rows = static_cast<int>(N), ld = std::max(I, 1);
  if (precision == Precision::bf16) {
    const Bf16Operand x16 = bf16_operand(kX, x, N * I);  // (N, I)
    const Bf16Operand w16 = bf16_weights(w, I, O);       // (O, I)
    gemm_bf16(false, true, rows, O, I, x16, ld, w16, ld, accumulate, out, O);
  } else {
    gemm_f32(false, true, rows, O, I, x, ld, w.values, ld, accumulate, out, O);
  }
}

void CpuBackend::linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x, WeightMatrix w,
                                 LinearShape shape, bool accumulate_dx, Precision precision) {
  const auto [N, I, O] = shape;
  if (N == 0) return;
  const int tokens = static_cast<int>(N);
  const bool bf16 = precision == Precision::bf16;
  const Bf16Operand dout16 = bf16 && O > 0 && I > 0 ? bf16_operand(kDout, dout, N * O) : Bf16Operand{};  // (N, O)
  if (dx && I > 0) {
    // dx (N, I) = dout (N, O) · w (O, I) (+ dx)
    if (bf16) {
      const Bf16Operand w16 = bf16_weights(w, I, O);  // (O, I)
      gemm_bf16(false, false, tokens, I, O, dout16, std::max(O, 1), w16, I, accumulate_dx, dx, I);
    } else {
      gemm_f32(false, false, tokens, I, O, dout, std::max(O, 1), w.values, I, accumulate_dx, dx, I);
    }
  }
  if (O == 0) return;
  if (I > 0) {
    // dw (O, I) += dout^T (O, N) · x (N, I)
    if (bf16) {
      const Bf16Operand x16 = bf16_operand(kX, x, N * I);  // (N, I)
      gemm_bf16(true, false, O, I, tokens, dout16, O, x16, I, true, dw, I);
    } else {
      gemm_f32(true, false, O, I, tokens, dout, O, x, I, true, dw, I);
    }
  }
  if (dbias) accumulate_column_sums(dbias, dout, N, O);  // fp32 dout in both precisions
}

}  // namespace fpdt::kernels::cpu

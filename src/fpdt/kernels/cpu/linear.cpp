// Fast fp32 linear layer (semantics: reference/linear.h; w is (out, in)). Every product is one GEMM
// on the OpenMP team (team_sgemm: a single-threaded OpenBLAS sgemm per thread, on its own block of
// the output); the bias is written (or added) before the forward GEMM, which then runs with beta = 1.
// dbias sums dout's columns in double, column blocks across threads. The only heap memory is the
// weight gradient's scratch (team_sgemm), grown once per thread.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cpu/cpu_backend.h"

namespace fpdt::kernels::cpu {

namespace {

constexpr int64_t kParallelMinElements = int64_t{1} << 15;  // below this a thread team costs more than it saves
constexpr int kColumnBlock = 128;                            // columns per block in the dbias pass (1 KiB of doubles)
// team_sgemm: blocks of the output are whole multiples of the SkylakeX/Haswell sgemm micro-tile's 16
// rows; below kTeamMinFlops (~10 µs of one core) one thread runs the whole product.
constexpr int kBlockAlign = 16;
constexpr double kTeamMinFlops = 2.0e6;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// C (M, N) = A (M, K) · B (K, N) + beta · C, row-major, A and B each read transposed (trans_a: A is
// stored (K, M)) or not, as cblas_sgemm with alpha = 1, shared by the OpenMP team: each thread runs one
// single-threaded OpenBLAS sgemm on its part (the backend holds OpenBLAS at one thread: its own pool
// would spin against the team on the same cores, which measured 10× slower steps on a loaded
// machine). A thread packs whatever its part reads, so the cut avoids packing a long operand twice:
//   - K at least twice M and N (a weight gradient, K = tokens): K is cut; thread 0 sums its tokens
//     into C, the others into scratch, then C += the scratch blocks in thread order;
//   - else C is cut along its longer side: rows (each thread packs all of B) when M ≥ N, else columns.
// Deterministic for a given thread count.
void team_sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* a, int lda, const float* b, int ldb,
                float beta, float* c, int ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool by_k = K >= 2 * int64_t{std::max(M, N)};
  const bool by_rows = M >= N;
  const int64_t extent = by_k ? K : by_rows ? M : N;
  const double flops = 2.0 * M * N * static_cast<double>(K);
  const int parts = flops < kTeamMinFlops ? 1 : static_cast<int>(std::min<int64_t>(threads, ceil_div(extent, kBlockAlign)));
  if (parts <= 1) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t per_part = ceil_div(ceil_div(extent, kBlockAlign), parts) * kBlockAlign;
  const size_t block = static_cast<size_t>(M) * N;  // one scratch C (M, N), dense
  thread_local std::vector<float> scratch_storage;  // the K cut's partial sums of threads 1 .. parts − 1
  if (by_k && scratch_storage.size() < block * (parts - 1)) scratch_storage.resize(block * (parts - 1));
  float* scratch = scratch_storage.data();  // the calling thread's, shared with the team
#pragma omp parallel num_threads(parts)
  {
    const int part = omp_get_thread_num();
    const int64_t begin = part * per_part, end = std::min(extent, begin + per_part);
    const int size = static_cast<int>(std::max<int64_t>(end - begin, 0));
    if (by_k) {  // tokens [begin, end): columns of op(A), rows of op(B)
      float* target = part == 0 ? c : scratch + (part - 1) * block;
      if (size > 0 || part > 0)
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, size, 1.0f, a + (trans_a ? begin * lda : begin), lda,
                    b + (trans_b ? begin : begin * ldb), ldb, part == 0 ? beta : 0.0f, target, part == 0 ? ldc : N);
#pragma omp barrier
#pragma omp for schedule(static)
      for (int row = 0; row < M; ++row) {
        float* c_row = c + static_cast<int64_t>(row) * ldc;  // (N)
        for (int p = 1; p < parts; ++p) {
          const float* partial = scratch + (p - 1) * block + static_cast<size_t>(row) * N;
          for (int col = 0; col < N; ++col) c_row[col] += partial[col];
        }
      }
    } else if (size > 0 && by_rows) {  // rows [begin, end) of C and of op(A)
      cblas_sgemm(CblasRowMajor, ta, tb, size, N, K, 1.0f, a + (trans_a ? begin : begin * lda), lda, b, ldb, beta,
                  c + begin * ldc, ldc);
    } else if (size > 0) {  // columns [begin, end) of C and of op(B)
      cblas_sgemm(CblasRowMajor, ta, tb, M, size, K, 1.0f, a, lda, b + (trans_b ? begin * ldb : begin), ldb, beta,
                  c + begin, ldc);
    }
  }
}

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

}  // namespace

CpuBackend::CpuBackend() { openblas_set_num_threads(1); }

// Dimensions go to BLAS as 32-bit ints: a chunk's token count N stays far below 2^31.
void CpuBackend::linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I, int O,
                                bool accumulate, Precision precision) {
  if (precision != Precision::fp32) throw Error("kernels", "linear_forward: bf16 is not built on the cpu backend yet");
  if (N == 0 || O == 0) return;
  float beta = accumulate ? 1.0f : 0.0f;
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
    beta = 1.0f;
  }
  // out (N, O) = x (N, I) · w^T (I, O) + beta · out
  team_sgemm(false, true, static_cast<int>(N), O, I, x, std::max(I, 1), w, std::max(I, 1), beta, out, O);
}

void CpuBackend::linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                                 int64_t N, int I, int O, bool accumulate_dx, Precision precision) {
  if (precision != Precision::fp32) throw Error("kernels", "linear_backward: bf16 is not built on the cpu backend yet");
  if (N == 0) return;
  if (dx && I > 0) {
    // dx (N, I) = dout (N, O) · w (O, I) + beta · dx
    team_sgemm(false, false, static_cast<int>(N), I, O, dout, std::max(O, 1), w, I, accumulate_dx ? 1.0f : 0.0f, dx, I);
  }
  if (O == 0) return;
  if (I > 0) {
    // dw (O, I) += dout^T (O, N) · x (N, I)
    team_sgemm(true, false, O, I, static_cast<int>(N), dout, O, x, I, 1.0f, dw, I);
  }
  if (dbias) accumulate_column_sums(dbias, dout, N, O);
}

}  // namespace fpdt::kernels::cpu

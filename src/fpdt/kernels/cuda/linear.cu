// CUDA linear layer (semantics: reference/linear.h): the GEMMs through cuBLASLt in strict fp32
// (CUBLAS_COMPUTE_32F, no TF32), plus the bias kernels — bias added to every row, and the bias
// gradient as deterministic column sums (one thread per column, no atomics).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/cublaslt_library.h"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"
#include "fpdt/kernels/cuda/cuda_check.h"

namespace fpdt::kernels::cuda {

namespace {

// C (m, n; column-major, ldc) = alpha · op(A) · op(B) + beta · C in fp32 through cuBLASLt.
// Descriptors are host objects (no device allocation); the algorithm comes from the heuristic.
void lt_sgemm(cublasLtHandle_t handle, cudaStream_t stream, void* workspace, cublasOperation_t trans_a,
              cublasOperation_t trans_b, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda,
              const float* B, int64_t ldb, float* C, int64_t ldc, float alpha, float beta) {
  if (m == 0 || n == 0) return;
  const CublasLtLibrary& lt = cublaslt();
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, c_layout = nullptr;
  FPDT_CUBLAS_CHECK(lt.matmul_desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  FPDT_CUBLAS_CHECK(lt.matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  FPDT_CUBLAS_CHECK(lt.matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  const bool ta = trans_a != CUBLAS_OP_N, tb = trans_b != CUBLAS_OP_N;
  FPDT_CUBLAS_CHECK(lt.matrix_layout_create(&a_layout, CUDA_R_32F, ta ? k : m, ta ? m : k, lda));
  FPDT_CUBLAS_CHECK(lt.matrix_layout_create(&b_layout, CUDA_R_32F, tb ? n : k, tb ? k : n, ldb));
  FPDT_CUBLAS_CHECK(lt.matrix_layout_create(&c_layout, CUDA_R_32F, m, n, ldc));
  cublasLtMatmulPreference_t preference = nullptr;
  FPDT_CUBLAS_CHECK(lt.matmul_preference_create(&preference));
  size_t workspace_bytes = kLtWorkspaceBytes;
  FPDT_CUBLAS_CHECK(lt.matmul_preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  FPDT_CUBLAS_CHECK(lt.matmul_algo_get_heuristic(handle, op, a_layout, b_layout, c_layout, c_layout, preference, 1,
                                                 &heuristic, &found));
  FPDT_CHECK(found > 0, "kernels", "cuBLASLt found no fp32 algorithm for a " + std::to_string(m) + "x" +
                                       std::to_string(n) + "x" + std::to_string(k) + " GEMM",
             "report the shape; the model's dims may need padding");
  if (k == 0) {  // cuBLASLt requires k > 0: C = beta · C
    if (beta == 0.0f) FPDT_CUDA_CHECK(cudaMemset2DAsync(C, ldc * sizeof(float), 0, m * sizeof(float), n, stream));
  } else {
    FPDT_CUBLAS_CHECK(lt.matmul(handle, op, &alpha, A, a_layout, B, b_layout, &beta, C, c_layout, C, c_layout,
                                &heuristic.algo, workspace, kLtWorkspaceBytes, stream));
  }
  lt.matmul_preference_destroy(preference);
  lt.matrix_layout_destroy(c_layout);
  lt.matrix_layout_destroy(b_layout);
  lt.matrix_layout_destroy(a_layout);
  lt.matmul_desc_destroy(op);
}

__global__ void add_bias_rows_kernel(float* out, const float* bias, int64_t N, int O) {
  const int64_t total = N * O;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    out[i] += bias[i % O];
}

// One thread per column: adjacent threads read adjacent columns of a row (coalesced); deterministic.
__global__ void column_sums_kernel(float* dbias, const float* dout, int64_t N, int O) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= O) return;
  double sum = 0.0;
  for (int64_t n = 0; n < N; ++n) sum += dout[n * O + o];
  dbias[o] = static_cast<float>(dbias[o] + sum);
}

}  // namespace

// Row-major (N, O) = (N, I)·(O, I)ᵀ is column-major outᵀ (O, N) = w·xᵀ with w read transposed.
void CudaBackend::linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I,
                                 int O, bool accumulate) {
  lt_sgemm(lt_, stream_, lt_workspace_, CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, w, I, x, I, out, O, 1.0f,
           accumulate ? 1.0f : 0.0f);
  if (bias && N * O > 0) {
    add_bias_rows_kernel<<<blocks_for(N * O), kThreads, 0, stream_>>>(out, bias, N, O);
    FPDT_CUDA_CHECK_LAUNCH();
  }
}

// dx (N, I) = dout·w: column-major dxᵀ (I, N) = w(I, O as stored)·doutᵀ.
// dw (O, I) += doutᵀ·x: column-major dwᵀ (I, O) = xᵀ (I, N)·dout (N, O).
void CudaBackend::linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                                  const float* w, int64_t N, int I, int O, bool accumulate_dx) {
  if (dx)
    lt_sgemm(lt_, stream_, lt_workspace_, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, w, I, dout, O, dx, I, 1.0f,
             accumulate_dx ? 1.0f : 0.0f);
  lt_sgemm(lt_, stream_, lt_workspace_, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, x, I, dout, O, dw, I, 1.0f, 1.0f);
  if (dbias && O > 0) {
    column_sums_kernel<<<(O + kThreads - 1) / kThreads, kThreads, 0, stream_>>>(dbias, dout, N, O);
    FPDT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace fpdt::kernels::cuda

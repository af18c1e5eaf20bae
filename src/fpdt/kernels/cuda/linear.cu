// CUDA linear layer (semantics: reference/linear.h): the GEMMs through cuBLASLt in strict fp32
// (CUBLAS_COMPUTE_32F, no TF32), each shape's descriptors and algorithm made once and cached
// (GemmPlans; the decisions without CUDA types are gemm_plan.h's), plus the bias kernels — bias added
// to every row, and the bias gradient as deterministic column sums (column_sums.cuh, no atomics).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/column_sums.cuh"
#include "fpdt/kernels/cuda/cublaslt_library.h"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"
#include "fpdt/kernels/cuda/cuda_check.h"
#include "fpdt/kernels/cuda/gemm_plan.h"

namespace fpdt::kernels::cuda {

namespace {

// Owners of cuBLASLt's descriptors: destroyed however the scope is left (a failed check included).
struct MatmulDescDelete {
  void operator()(cublasLtMatmulDesc_t desc) const { cublaslt().matmul_desc_destroy(desc); }
};
struct LayoutDelete {
  void operator()(cublasLtMatrixLayout_t layout) const { cublaslt().matrix_layout_destroy(layout); }
};
struct PreferenceDelete {
  void operator()(cublasLtMatmulPreference_t preference) const { cublaslt().matmul_preference_destroy(preference); }
};
using MatmulDesc = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, MatmulDescDelete>;
using Layout = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LayoutDelete>;
using Preference = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, PreferenceDelete>;

Layout make_layout(int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  FPDT_CUBLAS_CHECK(cublaslt().matrix_layout_create(&layout, CUDA_R_32F, rows, cols, ld));
  return Layout(layout);
}

}  // namespace

// One GEMM shape's descriptors and the algorithm the heuristic chose for it (gemm_plan.h's key).
struct GemmPlan {
  MatmulDesc op;
  Layout a, b, c;
  cublasLtMatmulAlgo_t algo{};
};

GemmPlans::GemmPlans() = default;
GemmPlans::~GemmPlans() = default;

const GemmPlan& GemmPlans::find(cublasLtHandle_t handle, const GemmKey& key) {
  const auto found = plans_.find(key);
  if (found != plans_.end()) return *found->second;
  const CublasLtLibrary& lt = cublaslt();
  auto plan = std::make_unique<GemmPlan>();
  cublasLtMatmulDesc_t op = nullptr;
  FPDT_CUBLAS_CHECK(lt.matmul_desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  plan->op.reset(op);
  const cublasOperation_t trans_a = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_b = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  FPDT_CUBLAS_CHECK(lt.matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  FPDT_CUBLAS_CHECK(lt.matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  plan->a = make_layout(key.trans_a ? key.k : key.m, key.trans_a ? key.m : key.k, key.lda);
  plan->b = make_layout(key.trans_b ? key.n : key.k, key.trans_b ? key.k : key.n, key.ldb);
  plan->c = make_layout(key.m, key.n, key.ldc);
  cublasLtMatmulPreference_t preference_handle = nullptr;
  FPDT_CUBLAS_CHECK(lt.matmul_preference_create(&preference_handle));
  const Preference preference(preference_handle);
  const size_t workspace_bytes = kLtWorkspaceBytes;
  FPDT_CUBLAS_CHECK(lt.matmul_preference_set_attribute(preference_handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes, sizeof(workspace_bytes)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
  for (const auto& [attribute, bytes] : alignments)
    FPDT_CUBLAS_CHECK(lt.matmul_preference_set_attribute(preference_handle, attribute, &bytes, sizeof(bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found_count = 0;
  FPDT_CUBLAS_CHECK(lt.matmul_algo_get_heuristic(handle, op, plan->a.get(), plan->b.get(), plan->c.get(),
                                                 plan->c.get(), preference_handle, 1, &heuristic, &found_count));
  FPDT_CHECK(found_count > 0, "kernels",
             "cuBLASLt found no fp32 algorithm for a " + std::to_string(key.m) + "x" + std::to_string(key.n) + "x" +
                 std::to_string(key.k) + " GEMM (operands aligned to " + std::to_string(key.align_a) + "/" +
                 std::to_string(key.align_b) + "/" + std::to_string(key.align_c) + " bytes)",
             "report the shape; the model's dims may need padding");
  plan->algo = heuristic.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

namespace {

// C (m, n; column-major, ldc) = alpha · op(A) · op(B) + beta · C in fp32 through cuBLASLt, with the
// shape's cached plan. k = 0 never reaches cuBLASLt (it requires k > 0): C = beta · C.
void lt_sgemm(GemmPlans& plans, cublasLtHandle_t handle, cudaStream_t stream, void* workspace, bool trans_a,
              bool trans_b, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
              float* C, int64_t ldc, float alpha, float beta) {
  switch (gemm_action(m, n, k, beta)) {
    case GemmAction::nothing: return;
    case GemmAction::zero_c:
      FPDT_CUDA_CHECK(cudaMemset2DAsync(C, ldc * sizeof(float), 0, m * sizeof(float), n, stream));
      return;
    case GemmAction::matmul: break;
  }
  const GemmKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alignment_bytes(A), alignment_bytes(B),
                    alignment_bytes(C)};
  const GemmPlan& plan = plans.find(handle, key);
  FPDT_CUBLAS_CHECK(cublaslt().matmul(handle, plan.op.get(), &alpha, A, plan.a.get(), B, plan.b.get(), &beta, C,
                                      plan.c.get(), C, plan.c.get(), &plan.algo, workspace, kLtWorkspaceBytes,
                                      stream));
}

__global__ void add_bias_rows_kernel(float* out, const float* bias, int64_t N, int O) {
  const int64_t total = N * O;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    out[i] += bias[i % O];
}

// The bias gradient's term of row n, column o: dout[n, o].
struct BiasGradientTerms {
  const float* dout;  // (N, O)
  int O;
  __device__ void operator()(int64_t n, int o, float (&sum)[1]) const { sum[0] += dout[n * O + o]; }
};

}  // namespace

// Row-major (N, O) = (N, I)·(O, I)ᵀ is column-major outᵀ (O, N) = w·xᵀ with w read transposed.
void CudaBackend::linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I,
                                 int O, bool accumulate, Precision precision) {
  if (precision != Precision::fp32) throw Error("kernels", "linear_forward: bf16 is not built on the cuda backend yet");
  lt_sgemm(gemm_plans_, lt_, stream_, lt_workspace_, true, false, O, N, I, w, I, x, I, out, O, 1.0f,
           accumulate ? 1.0f : 0.0f);
  if (bias && N * O > 0) {
    add_bias_rows_kernel<<<blocks_for(N * O), kThreads, 0, stream_>>>(out, bias, N, O);
    FPDT_CUDA_CHECK_LAUNCH();
  }
}

// dx (N, I) = dout·w: column-major dxᵀ (I, N) = w(I, O as stored)·doutᵀ.
// dw (O, I) += doutᵀ·x: column-major dwᵀ (I, O) = xᵀ (I, N)·dout (N, O).
void CudaBackend::linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                                  const float* w, int64_t N, int I, int O, bool accumulate_dx,
                                  Precision precision) {
  if (precision != Precision::fp32) throw Error("kernels", "linear_backward: bf16 is not built on the cuda backend yet");
  if (dx)
    lt_sgemm(gemm_plans_, lt_, stream_, lt_workspace_, false, false, I, N, O, w, I, dout, O, dx, I, 1.0f,
             accumulate_dx ? 1.0f : 0.0f);
  lt_sgemm(gemm_plans_, lt_, stream_, lt_workspace_, false, true, I, O, N, x, I, dout, O, dw, I, 1.0f, 1.0f);
  if (dbias)
    add_column_sums<1>(stream_, scratch(column_sums_scratch_floats(1, N, O)), ColumnOutputs<1>{{dbias}},
                       BiasGradientTerms{dout, O}, N, O);
}

}  // namespace fpdt::kernels::cuda

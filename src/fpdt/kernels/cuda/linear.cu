// CUDA linear layer (semantics: reference/linear.h): the GEMMs through cuBLASLt with fp32 accumulation
// (CUBLAS_COMPUTE_32F, no TF32) and fp32 output, on fp32 operands or (Precision::bf16) on bf16 copies of
// x, w and dout made by one rounding launch per op; each shape's descriptors and algorithm made once and
// cached (GemmPlans; the decisions without CUDA types are gemm_plan.h's), plus the bias kernels, fp32 in
// both — bias added to every row, and the bias gradient as deterministic column sums (column_sums.cuh).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "fpdt/base/cuda_check.h"
#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/column_sums.cuh"
#include "fpdt/kernels/cuda/cublas_check.h"
#include "fpdt/kernels/cuda/cublaslt_library.h"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"
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

Layout make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  FPDT_CUBLAS_CHECK(cublaslt().matrix_layout_create(&layout, type, rows, cols, ld));
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
  const cudaDataType_t input_type = key.inputs == GemmInputs::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  plan->a = make_layout(input_type, key.trans_a ? key.k : key.m, key.trans_a ? key.m : key.k, key.lda);
  plan->b = make_layout(input_type, key.trans_b ? key.n : key.k, key.trans_b ? key.k : key.n, key.ldb);
  plan->c = make_layout(CUDA_R_32F, key.m, key.n, key.ldc);
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
             std::string("cuBLASLt found no ") + (key.inputs == GemmInputs::bf16 ? "bf16 x bf16 -> fp32" : "fp32") +
                 " algorithm for a " + std::to_string(key.m) + "x" + std::to_string(key.n) + "x" +
                 std::to_string(key.k) + " GEMM (operands aligned to " + std::to_string(key.align_a) + "/" +
                 std::to_string(key.align_b) + "/" + std::to_string(key.align_c) + " bytes)",
             "report the shape; the model's dims may need padding");
  plan->algo = heuristic.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

namespace {

// C (m, n; column-major, ldc; fp32) = alpha · op(A) · op(B) + beta · C through cuBLASLt, A and B of
// element type `inputs`, accumulated in fp32, with the shape's cached plan. k = 0 never reaches cuBLASLt
// (it requires k > 0): C = beta · C.
void lt_gemm(GemmPlans& plans, cublasLtHandle_t handle, cudaStream_t stream, void* workspace, GemmInputs inputs,
             bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B,
             int64_t ldb, float* C, int64_t ldc, float alpha, float beta) {
  switch (gemm_action(m, n, k, beta)) {
    case GemmAction::nothing: return;
    case GemmAction::zero_c:
      FPDT_CUDA_CHECK(cudaMemset2DAsync(C, ldc * sizeof(float), 0, m * sizeof(float), n, stream));
      return;
    case GemmAction::matmul: break;
  }
  const GemmKey key{inputs, trans_a, trans_b, m, n, k, lda, ldb, ldc, alignment_bytes(A), alignment_bytes(B),
                    alignment_bytes(C)};
  const GemmPlan& plan = plans.find(handle, key);
  FPDT_CUBLAS_CHECK(cublaslt().matmul(handle, plan.op.get(), &alpha, A, plan.a.get(), B, plan.b.get(), &beta, C,
                                      plan.c.get(), C, plan.c.get(), &plan.algo, workspace, kLtWorkspaceBytes,
                                      stream));
}

// Up to three fp32 arrays rounded to nearest bf16 (ties to even, as tensor/dtype.h's float_to_bf16) into
// their copies, in one launch.
struct Bf16Copies {
  const float* src[3];
  __nv_bfloat16* dst[3];
  int64_t n[3];
};

__global__ void to_bf16_kernel(const Bf16Copies copies) {
  for (int c = 0; c < 3; ++c)
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < copies.n[c];
         i += int64_t(gridDim.x) * blockDim.x)
      copies.dst[c][i] = __float2bfloat16_rn(copies.src[c][i]);
}

GemmInputs gemm_inputs_of(Precision precision) {
  return precision == Precision::bf16 ? GemmInputs::bf16 : GemmInputs::fp32;
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

std::array<const void*, 3> CudaBackend::gemm_inputs(
    Precision precision, const std::array<std::pair<const float*, int64_t>, 3>& operands) {
  std::array<const void*, 3> inputs{};
  if (precision == Precision::fp32) {
    for (size_t i = 0; i < operands.size(); ++i) inputs[i] = operands[i].first;
    return inputs;
  }
  Bf16Copies copies{};
  size_t bytes = 0, longest = 0;
  for (const auto& [values, count] : operands) bytes += values ? bf16_copy_bytes(count) : 0;
  char* base = static_cast<char*>(grow(operand_scratch_, bytes));
  for (size_t i = 0, offset = 0; i < operands.size(); ++i) {
    const auto& [values, count] = operands[i];
    if (values == nullptr) continue;
    copies.src[i] = values;
    copies.dst[i] = reinterpret_cast<__nv_bfloat16*>(base + offset);
    copies.n[i] = count;
    inputs[i] = copies.dst[i];
    offset += bf16_copy_bytes(count);
    longest = std::max(longest, static_cast<size_t>(count));
  }
  if (longest > 0) {
    to_bf16_kernel<<<blocks_for(static_cast<int64_t>(longest)), kThreads, 0, stream_>>>(copies);
    FPDT_CUDA_CHECK_LAUNCH();
  }
  return inputs;
}

// Row-major (N, O) = (N, I)·(O, I)ᵀ is column-major outᵀ (O, N) = w·xᵀ with w read transposed.
// A w whose working copy's bf16 words are given is read as they are (no copy); otherwise gemm_inputs
// converts it with the other operands.
void CudaBackend::linear_forward(float* out, const float* x, WeightMatrix w, const float* bias, int64_t N, int I,
                                 int O, bool accumulate, Precision precision) {
  const bool w_words = w.reads_bf16(precision);
  std::array<const void*, 3> w_x =
      gemm_inputs(precision, {{{w_words ? nullptr : w.values, int64_t{O} * I}, {x, N * I}, {nullptr, 0}}});
  if (w_words) w_x[0] = w.bf16;
  lt_gemm(gemm_plans_, lt_, stream_, lt_workspace_, gemm_inputs_of(precision), true, false, O, N, I, w_x[0], I, w_x[1],
          I, out, O, 1.0f, accumulate ? 1.0f : 0.0f);
  if (bias && N * O > 0) {
    add_bias_rows_kernel<<<blocks_for(N * O), kThreads, 0, stream_>>>(out, bias, N, O);
    FPDT_CUDA_CHECK_LAUNCH();
  }
}

// dx (N, I) = dout·w: column-major dxᵀ (I, N) = w(I, O as stored)·doutᵀ.
// dw (O, I) += doutᵀ·x: column-major dwᵀ (I, O) = xᵀ (I, N)·dout (N, O).
void CudaBackend::linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                                  WeightMatrix w, LinearShape shape, bool accumulate_dx, Precision precision) {
  const auto [N, I, O] = shape;
  const GemmInputs inputs = gemm_inputs_of(precision);
  const bool w_words = w.reads_bf16(precision);
  auto [dout_in, x_in, w_in] =
      gemm_inputs(precision, {{{dout, N * O}, {x, N * I}, {dx && !w_words ? w.values : nullptr, int64_t{O} * I}}});
  if (dx && w_words) w_in = w.bf16;
  if (dx)
    lt_gemm(gemm_plans_, lt_, stream_, lt_workspace_, inputs, false, false, I, N, O, w_in, I, dout_in, O, dx, I,
            1.0f, accumulate_dx ? 1.0f : 0.0f);
  lt_gemm(gemm_plans_, lt_, stream_, lt_workspace_, inputs, false, true, I, O, N, x_in, I, dout_in, O, dw, I, 1.0f,
          1.0f);
  if (dbias)
    add_column_sums<1>(stream_, scratch(column_sums_scratch_floats(1, N, O)), ColumnOutputs<1>{{dbias}},
                       BiasGradientTerms{dout, O}, N, O);
}

}  // namespace fpdt::kernels::cuda

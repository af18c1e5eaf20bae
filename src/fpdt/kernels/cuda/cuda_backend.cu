// CudaBackend: the Backend interface over DEVICE pointers on the current GPU, fp32 storage and
// compute. It owns one stream (every launch and cuBLASLt call goes to it), a cuBLASLt handle, a
// 32 MiB cuBLASLt workspace and a scratch buffer for attention's delta, grown only when a larger
// full-sequence backward first needs it. Ops return without waiting except sum_squares, which
// returns a host double and so synchronises the stream. GEMMs: cuBLASLt, CUBLAS_COMPUTE_32F (strict
// fp32, no TF32); bf16 storage with fp32 accumulation is the next step (issue 8). Also the device
// memory helpers and cuda_available() of cuda_backend.h.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/cuda_backend.h"
#include "fpdt/kernels/cuda/cuda_check.h"
#include "fpdt/kernels/cuda/cuda_kernels.h"
#include "fpdt/kernels/cuda/cuda_memory.h"

namespace fpdt::kernels {

namespace {

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

// C (m, n; column-major, ldc) = alpha · op(A) · op(B) + beta · C in fp32 through cuBLASLt.
// Descriptors are host objects (no device allocation); the algorithm comes from the heuristic.
void lt_sgemm(cublasLtHandle_t handle, cudaStream_t stream, void* workspace, cublasOperation_t trans_a,
              cublasOperation_t trans_b, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda,
              const float* B, int64_t ldb, float* C, int64_t ldc, float alpha, float beta) {
  if (m == 0 || n == 0) return;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, c_layout = nullptr;
  FPDT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  FPDT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  FPDT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  const bool ta = trans_a != CUBLAS_OP_N, tb = trans_b != CUBLAS_OP_N;
  FPDT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_32F, ta ? k : m, ta ? m : k, lda));
  FPDT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_32F, tb ? n : k, tb ? k : n, ldb));
  FPDT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c_layout, CUDA_R_32F, m, n, ldc));
  cublasLtMatmulPreference_t preference = nullptr;
  FPDT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  size_t workspace_bytes = kLtWorkspaceBytes;
  FPDT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  FPDT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, op, a_layout, b_layout, c_layout, c_layout, preference, 1,
                                                   &heuristic, &found));
  FPDT_CHECK(found > 0, "kernels", "cuBLASLt found no fp32 algorithm for a " + std::to_string(m) + "x" +
                                       std::to_string(n) + "x" + std::to_string(k) + " GEMM",
             "report the shape; the model's dims may need padding");
  if (k == 0) {  // cuBLASLt requires k > 0: C = beta · C
    if (beta == 0.0f) FPDT_CUDA_CHECK(cudaMemset2DAsync(C, ldc * sizeof(float), 0, m * sizeof(float), n, stream));
  } else {
    FPDT_CUBLAS_CHECK(cublasLtMatmul(handle, op, &alpha, A, a_layout, B, b_layout, &beta, C, c_layout, C, c_layout,
                                     &heuristic.algo, workspace, kLtWorkspaceBytes, stream));
  }
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(c_layout);
  cublasLtMatrixLayoutDestroy(b_layout);
  cublasLtMatrixLayoutDestroy(a_layout);
  cublasLtMatmulDescDestroy(op);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    FPDT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FPDT_CUBLAS_CHECK(cublasLtCreate(&lt_));
    FPDT_CUDA_CHECK(cudaMalloc(&lt_workspace_, kLtWorkspaceBytes));
    FPDT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sum_device_), sizeof(double)));
    FPDT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&sum_host_), sizeof(double)));
    cuda::attention_configure();
    memory_ = cuda::make_device_memory(stream_);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    memory_.reset();
    cudaFree(scratch_);
    cudaFreeHost(sum_host_);
    cudaFree(sum_device_);
    cudaFree(lt_workspace_);
    cublasLtDestroy(lt_);
    cudaStreamDestroy(stream_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  DeviceMemory& memory() override { return *memory_; }

  void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int h,
                         bool accumulate) override {
    cuda::embedding_forward(stream_, out, ids, table, N, h, accumulate);
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) override {
    cuda::embedding_backward(stream_, dtable, dout, ids, N, h);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int h,
                       double eps) override {
    cuda::rmsnorm_forward(stream_, out, rstd, x, weight, N, h, eps);
  }
  void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                        const float* rstd, int64_t N, int h) override {
    cuda::rmsnorm_backward(stream_, dx, dweight, dout, x, weight, rstd, N, h);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                         const float* bias, int64_t N, int h, double eps) override {
    cuda::layernorm_forward(stream_, out, mean, rstd, x, weight, bias, N, h, eps);
  }
  void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                          const float* weight, const float* mean, const float* rstd, int64_t N, int h) override {
    cuda::layernorm_backward(stream_, dx, dweight, dbias, dout, x, weight, mean, rstd, N, h);
  }

  // Row-major (N, O) = (N, I)·(O, I)ᵀ is column-major outᵀ (O, N) = w·xᵀ with w read transposed.
  void linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I, int O,
                      bool accumulate) override {
    lt_sgemm(lt_, stream_, lt_workspace_, CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, w, I, x, I, out, O, 1.0f,
             accumulate ? 1.0f : 0.0f);
    if (bias) cuda::add_bias_rows(stream_, out, bias, N, O);
  }
  // dx (N, I) = dout·w: column-major dxᵀ (I, N) = w(I, O as stored)·doutᵀ.
  // dw (O, I) += doutᵀ·x: column-major dwᵀ (I, O) = xᵀ (I, N)·dout (N, O).
  void linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                       int64_t N, int I, int O, bool accumulate_dx) override {
    if (dx)
      lt_sgemm(lt_, stream_, lt_workspace_, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, w, I, dout, O, dx, I, 1.0f,
               accumulate_dx ? 1.0f : 0.0f);
    lt_sgemm(lt_, stream_, lt_workspace_, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, x, I, dout, O, dw, I, 1.0f, 1.0f);
    if (dbias) cuda::accumulate_column_sums(stream_, dbias, dout, N, O);
  }

  void rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim, double theta) override {
    cuda::rope_rotate(stream_, x, pos, N, H, D, rotary_dim, theta, +1.0);
  }
  void rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, int rotary_dim,
                     double theta) override {
    cuda::rope_rotate(stream_, dx, pos, N, H, D, rotary_dim, theta, -1.0);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override {
    cuda::swiglu_forward(stream_, out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       int64_t n) override {
    cuda::swiglu_backward(stream_, dgate, dup, dout, gate, up, n);
  }
  void gelu_forward(float* out, const float* x, int64_t n) override { cuda::gelu_forward(stream_, out, x, n); }
  void gelu_backward(float* dx, const float* dout, const float* x, int64_t n) override {
    cuda::gelu_backward(stream_, dx, dout, x, n);
  }

  // Full-sequence causal attention = one chunk pair (q block = kv block = the whole sequence).
  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         const int32_t* doc_ids, int B, int64_t S, int Hq, int Hkv, int D, double scale) override {
    cuda::attention_chunk_forward(stream_, out, lse, whole_sequence(q, k, v, doc_ids, B, S, Hq, Hkv, D, scale), false);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const int32_t* doc_ids, int B,
                          int64_t S, int Hq, int Hkv, int D, double scale) override {
    const AttentionChunkParams params = whole_sequence(q, k, v, doc_ids, B, S, Hq, Hkv, D, scale);
    float* delta = scratch(static_cast<size_t>(B) * Hq * S);  // (B, Hq, S)
    FPDT_CUDA_CHECK(cudaMemsetAsync(dq, 0, sizeof(float) * B * S * Hq * D, stream_));
    FPDT_CUDA_CHECK(cudaMemsetAsync(dk, 0, sizeof(float) * B * S * Hkv * D, stream_));
    FPDT_CUDA_CHECK(cudaMemsetAsync(dv, 0, sizeof(float) * B * S * Hkv * D, stream_));
    cuda::attention_chunk_delta(stream_, delta, dout, out, B, S, Hq, D);
    cuda::attention_chunk_backward(stream_, dq, dk, dv, dout, lse, delta, params);
  }
  void attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params, bool accumulate) override {
    validate(params);
    cuda::attention_chunk_forward(stream_, out, lse, params, accumulate);
  }
  void attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H,
                             int D) override {
    cuda::attention_chunk_delta(stream_, delta, dout, out, B, Cq, H, D);
  }
  void attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                const float* delta, const AttentionChunkParams& params) override {
    validate(params);
    cuda::attention_chunk_backward(stream_, dq, dk, dv, dout, lse, delta, params);
  }

  void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                             const float* mask, int64_t N, int V) override {
    cuda::cross_entropy_forward(stream_, losses, lse, logits, targets, mask, N, V);
  }
  void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                              const float* mask, double dloss_scale, int64_t N, int V) override {
    cuda::cross_entropy_backward(stream_, dlogits, logits, lse, targets, mask, dloss_scale, N, V);
  }
  void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n,
                    const AdamWParams& params) override {
    cuda::adamw_update(stream_, param, m, v, grad, n, params);
  }
  double sum_squares(const float* x, int64_t n) override {
    FPDT_CUDA_CHECK(cudaMemsetAsync(sum_device_, 0, sizeof(double), stream_));
    cuda::sum_squares(stream_, sum_device_, x, n);
    FPDT_CUDA_CHECK(cudaMemcpyAsync(sum_host_, sum_device_, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    FPDT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return *sum_host_;
  }
  void scale_inplace(float* x, float alpha, int64_t n) override { cuda::scale_inplace(stream_, x, alpha, n); }

 private:
  static AttentionChunkParams whole_sequence(const float* q, const float* k, const float* v, const int32_t* doc_ids,
                                             int B, int64_t S, int Hq, int Hkv, int D, double scale) {
    AttentionChunkParams params;
    params.q = q;
    params.k = k;
    params.v = v;
    params.q_doc_ids = doc_ids;
    params.kv_doc_ids = doc_ids;
    params.B = B;
    params.Cq = S;
    params.Ck = S;
    params.H = Hq;
    params.Hkv = Hkv;
    params.D = D;
    params.scale = scale;
    validate(params);
    return params;
  }

  static void validate(const AttentionChunkParams& p) {
    FPDT_CHECK(p.Hkv > 0 && p.H % p.Hkv == 0, "kernels",
               "attention needs H a multiple of Hkv, got H=" + std::to_string(p.H) + " Hkv=" + std::to_string(p.Hkv),
               "");
    FPDT_CHECK(p.D > 0 && p.D <= cuda::kMaxHeadDim, "kernels",
               "CUDA attention supports head dim 1..256, got " + std::to_string(p.D), "use --backend cpu");
    FPDT_CHECK((p.q_doc_ids == nullptr) == (p.kv_doc_ids == nullptr), "kernels",
               "attention chunk: q_doc_ids and kv_doc_ids must both be set or both null", "");
  }

  // Device scratch of at least `floats` floats; grows (synchronously, outside the steady state) only
  // when a larger request first arrives.
  float* scratch(size_t floats) {
    if (floats > scratch_floats_) {
      FPDT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      FPDT_CUDA_CHECK(cudaFree(scratch_));
      scratch_ = nullptr;
      FPDT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch_), floats * sizeof(float)));
      scratch_floats_ = floats;
    }
    return scratch_;
  }

  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_workspace_ = nullptr;
  double* sum_device_ = nullptr;
  double* sum_host_ = nullptr;  // pinned
  float* scratch_ = nullptr;
  size_t scratch_floats_ = 0;
  std::unique_ptr<DeviceMemory> memory_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() {
  FPDT_CHECK(cuda_available(), "kernels", "no usable CUDA device",
             "check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --backend cpu");
  return std::make_unique<CudaBackend>();
}

bool cuda_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

void* cuda_device_alloc(size_t bytes) {
  void* ptr = nullptr;
  FPDT_CUDA_CHECK(cudaMalloc(&ptr, bytes));
  return ptr;
}

void cuda_device_free(void* device_ptr) noexcept { cudaFree(device_ptr); }

// The backend's stream is non-blocking (it does not order with the legacy default stream a plain
// cudaMemcpy uses), so the copies first wait for the whole device.
void cuda_copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  FPDT_CUDA_CHECK(cudaDeviceSynchronize());
  FPDT_CUDA_CHECK(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
}

void cuda_copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  FPDT_CUDA_CHECK(cudaDeviceSynchronize());
  FPDT_CUDA_CHECK(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
}

void cuda_synchronize() { FPDT_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace fpdt::kernels

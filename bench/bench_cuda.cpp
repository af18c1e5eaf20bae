// Benchmarks of the CUDA backend (issue 8), one JSON line per measurement on stdout:
//   gemm: cuBLASLt M=N=K GEMM in fp32 (CUBLAS_COMPUTE_32F) and bf16 (fp32 accumulation), TFLOP/s
//   linear_fwd: CudaBackend::linear_forward at N=I=O (the same n as gemm's), fp32 and bf16 — in bf16 with
//     its rounding launch (x and w to bf16 copies) and fp32 output, what a bf16 run's GEMM costs
//   attention_chunk_fwd / attention_chunk_bwd: CudaBackend's chunk kernels in fp32 and bf16 on one fully
//     visible (q chunk, kv chunk) pair (q_begin = C, kv_begin = 0), FLOPs 4·B·H·C²·D forward and 2.5× that
//     backward (the FlashAttention convention; our backward recomputes scores, so it does more work); "kernel"
//     says which ran it: "cudnn" (cuDNN's fused attention, a bf16 run's path where it loads) or "cuda-core".
// Inputs are constant fill (values do not matter for speed). Timing: CUDA events around cuBLASLt on
// one stream; wall clock between device synchronisations for the backend (it owns its stream).
//   build/bench/bench_cuda [--gemm N] [--chunk C] [--heads H] [--head-dim D] [--iters K]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fpdt/base/cuda_check.h"
#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/cublas_check.h"
#include "fpdt/kernels/cuda/cuda_backend.h"

namespace {

struct Options {
  int64_t gemm = 8192;
  int64_t chunk = 4096;
  int heads = 16;
  int head_dim = 128;
  int iters = 10;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (key == "--gemm") options.gemm = value;
    else if (key == "--chunk") options.chunk = value;
    else if (key == "--heads") options.heads = static_cast<int>(value);
    else if (key == "--head-dim") options.head_dim = static_cast<int>(value);
    else if (key == "--iters") options.iters = static_cast<int>(value);
    else throw fpdt::Error("bench", "unknown option " + key, "see the comment at the top of bench/bench_cuda.cpp");
  }
  return options;
}

// TFLOP/s of an n×n×n GEMM C = A·B in `type` (fp32 or bf16), fp32 compute.
double gemm_tflops(int64_t n, cudaDataType_t type, int iters) {
  const size_t element = type == CUDA_R_32F ? 4 : 2;
  void *a = nullptr, *b = nullptr, *c = nullptr, *workspace = nullptr;
  const size_t bytes = static_cast<size_t>(n) * n * element, workspace_bytes = size_t(64) << 20;
  FPDT_CUDA_CHECK(cudaMalloc(&a, bytes));
  FPDT_CUDA_CHECK(cudaMalloc(&b, bytes));
  FPDT_CUDA_CHECK(cudaMalloc(&c, bytes));
  FPDT_CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  FPDT_CUDA_CHECK(cudaMemset(a, 0x3c, bytes));  // ≈ 0.0115 in both fp32 and bf16
  FPDT_CUDA_CHECK(cudaMemset(b, 0x3c, bytes));
  cudaStream_t stream;
  FPDT_CUDA_CHECK(cudaStreamCreate(&stream));
  cublasLtHandle_t handle;
  FPDT_CUBLAS_CHECK(cublasLtCreate(&handle));
  cublasLtMatmulDesc_t op;
  FPDT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t layout;
  FPDT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, n, n, n));
  cublasLtMatmulPreference_t preference;
  FPDT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  FPDT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  FPDT_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(handle, op, layout, layout, layout, layout, preference, 1, &heuristic, &found));
  FPDT_CHECK(found > 0, "bench", "cuBLASLt found no algorithm", "");
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    FPDT_CUBLAS_CHECK(cublasLtMatmul(handle, op, &alpha, a, layout, b, layout, &beta, c, layout, c, layout,
                                     &heuristic.algo, workspace, workspace_bytes, stream));
  };
  for (int i = 0; i < 3; ++i) run();
  cudaEvent_t start, stop;
  FPDT_CUDA_CHECK(cudaEventCreate(&start));
  FPDT_CUDA_CHECK(cudaEventCreate(&stop));
  FPDT_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) run();
  FPDT_CUDA_CHECK(cudaEventRecord(stop, stream));
  FPDT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  FPDT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(handle);
  cudaStreamDestroy(stream);
  cudaFree(workspace);
  cudaFree(c);
  cudaFree(b);
  cudaFree(a);
  return 2.0 * n * n * n * iters / (ms * 1e-3) / 1e12;
}

template <typename F>
double seconds_per_call(F&& f, int iters) {
  f();  // warm-up
  fpdt::kernels::cuda_synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  fpdt::kernels::cuda_synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
}

const char* precision_name(fpdt::kernels::Precision precision) {
  return precision == fpdt::kernels::Precision::bf16 ? "bf16" : "fp32";
}

// out (n, n) = x (n, n) · w (n, n)ᵀ through the backend, fp32 output.
void linear_bench(fpdt::kernels::Backend& backend, int64_t n, fpdt::kernels::Precision precision, int iters) {
  using namespace fpdt::kernels;
  const size_t bytes = sizeof(float) * n * n;
  auto alloc = [bytes] {
    float* ptr = static_cast<float*>(cuda_device_alloc(bytes));
    FPDT_CUDA_CHECK(cudaMemset(ptr, 0x3c, bytes));
    return ptr;
  };
  float *x = alloc(), *w = alloc(), *out = alloc();
  const int dim = static_cast<int>(n);
  const double s = seconds_per_call(
      [&] { backend.linear_forward(out, x, w, nullptr, n, dim, dim, false, precision); }, iters);
  std::printf("{\"bench\": \"linear_fwd\", \"dtype\": \"%s\", \"n\": %lld, \"ms\": %.3f, \"tflops\": %.2f}\n",
              precision_name(precision), static_cast<long long>(n), s * 1e3, 2.0 * n * n * n / s / 1e12);
  std::fflush(stdout);
  for (float* ptr : {x, w, out}) cuda_device_free(ptr);
}

void attention_bench(fpdt::kernels::Backend& backend, const Options& o, fpdt::kernels::Precision precision) {
  using namespace fpdt::kernels;
  const int64_t C = o.chunk;
  const int H = o.heads, D = o.head_dim;
  const size_t tensor_bytes = sizeof(float) * C * H * D, stat_bytes = sizeof(float) * H * C;
  auto alloc = [](size_t bytes) {
    float* ptr = static_cast<float*>(cuda_device_alloc(bytes));
    FPDT_CUDA_CHECK(cudaMemset(ptr, 0x3c, bytes));
    return ptr;
  };
  float *q = alloc(tensor_bytes), *k = alloc(tensor_bytes), *v = alloc(tensor_bytes), *out = alloc(tensor_bytes);
  float *dout = alloc(tensor_bytes), *dq = alloc(tensor_bytes), *dk = alloc(tensor_bytes), *dv = alloc(tensor_bytes);
  float *lse = alloc(stat_bytes), *delta = alloc(stat_bytes);
  AttentionChunkParams params;
  params.q = q;
  params.k = k;
  params.v = v;
  params.B = 1;
  params.Cq = params.Ck = C;
  params.H = params.Hkv = H;
  params.D = D;
  params.q_begin = C;  // every key visible: a full block
  params.kv_begin = 0;
  params.scale = 1.0 / std::sqrt(static_cast<double>(D));
  params.precision = precision;
  const char* fwd_kernel = cuda_attention_on_cudnn(backend, params, false) ? "cudnn" : "cuda-core";
  const char* bwd_kernel = cuda_attention_on_cudnn(backend, params, true) ? "cudnn" : "cuda-core";
  const double fwd_flops = 4.0 * H * C * C * D;
  const double fwd_s = seconds_per_call([&] { backend.attention_chunk_forward(out, lse, params, false); }, o.iters);
  backend.attention_chunk_delta(delta, dout, out, 1, C, H, D);
  const double bwd_s =
      seconds_per_call([&] { backend.attention_chunk_backward(dq, dk, dv, dout, lse, delta, params); }, o.iters);
  std::printf("{\"bench\": \"attention_chunk_fwd\", \"dtype\": \"%s\", \"kernel\": \"%s\", \"chunk\": %lld, "
              "\"heads\": %d, \"head_dim\": %d, \"ms\": %.3f, \"tflops\": %.2f}\n",
              precision_name(precision), fwd_kernel, static_cast<long long>(C), H, D, fwd_s * 1e3,
              fwd_flops / fwd_s / 1e12);
  std::printf("{\"bench\": \"attention_chunk_bwd\", \"dtype\": \"%s\", \"kernel\": \"%s\", \"chunk\": %lld, "
              "\"heads\": %d, \"head_dim\": %d, \"ms\": %.3f, \"tflops\": %.2f}\n",
              precision_name(precision), bwd_kernel, static_cast<long long>(C), H, D, bwd_s * 1e3,
              2.5 * fwd_flops / bwd_s / 1e12);
  std::fflush(stdout);
  for (float* ptr : {q, k, v, out, dout, dq, dk, dv, lse, delta}) cuda_device_free(ptr);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(argc, argv);
    FPDT_CHECK(fpdt::kernels::cuda_available(), "bench", "no usable CUDA device", "run on a GPU machine");
    for (cudaDataType_t type : {CUDA_R_32F, CUDA_R_16BF}) {
      const int64_t n = type == CUDA_R_32F ? options.gemm / 2 : options.gemm;  // fp32 is ~15× slower
      std::printf("{\"bench\": \"gemm\", \"dtype\": \"%s\", \"n\": %lld, \"tflops\": %.2f}\n",
                  type == CUDA_R_32F ? "fp32" : "bf16", static_cast<long long>(n), gemm_tflops(n, type, options.iters));
      std::fflush(stdout);
    }
    const auto backend = fpdt::kernels::make_cuda_backend();
    for (const auto precision : {fpdt::kernels::Precision::fp32, fpdt::kernels::Precision::bf16})
      linear_bench(*backend, precision == fpdt::kernels::Precision::fp32 ? options.gemm / 2 : options.gemm, precision,
                   options.iters);
    for (const auto precision : {fpdt::kernels::Precision::fp32, fpdt::kernels::Precision::bf16})
      attention_bench(*backend, options, precision);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_cuda: %s\n", error.what());
    return 1;
  }
  return 0;
}

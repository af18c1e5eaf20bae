// CudaBackend's construction and scratch (the class: cuda_backend_impl.h; its ops: the .cu file of
// each family), make_cuda_backend(), cuda_available() and the device-memory helpers of
// cuda_backend.h. GEMMs are cuBLASLt, in strict fp32 or on bf16 operands with fp32 accumulation
// (linear.cu); storage is fp32.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "fpdt/base/cuda_check.h"
#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/cublas_check.h"
#include "fpdt/kernels/cuda/cublaslt_library.h"
#include "fpdt/kernels/cuda/cuda_backend.h"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"
#include "fpdt/kernels/cuda/cuda_memory.h"
#include "fpdt/kernels/cuda/cudnn_sdpa.h"
#include "fpdt/kernels/cuda/device_choice.h"

namespace fpdt::kernels {

namespace cuda {

CudaBackend::CudaBackend() {
  int devices = 0;
  FPDT_CUDA_CHECK(cudaGetDeviceCount(&devices));
  FPDT_CUDA_CHECK(cudaSetDevice(device_for_local_rank(local_rank_from_environment(), devices)));
  FPDT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FPDT_CUBLAS_CHECK(cublaslt().create(&lt_));
  FPDT_CUDA_CHECK(cudaMalloc(&lt_workspace_, kLtWorkspaceBytes));
  FPDT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&sum_host_), sizeof(double)));
  configure_attention();
  sdpa_ = std::make_unique<CudnnSdpa>(stream_);
  memory_ = make_device_memory(stream_);
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  memory_.reset();
  sdpa_.reset();
  cudaFree(sdpa_scratch_.data);
  cudaFree(operand_scratch_.data);
  cudaFree(scratch_.data);
  cudaFreeHost(sum_host_);
  cudaFree(lt_workspace_);
  cublaslt().destroy(lt_);
  cudaStreamDestroy(stream_);
}

void* CudaBackend::grow(Scratch& scratch, size_t bytes) {
  if (bytes > scratch.bytes) {
    FPDT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    FPDT_CUDA_CHECK(cudaFree(scratch.data));
    scratch = Scratch{};
    FPDT_CUDA_CHECK(cudaMalloc(&scratch.data, bytes));
    scratch.bytes = bytes;
  }
  return scratch.data;
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend() {
  FPDT_CHECK(cuda_available(), "kernels", "no usable CUDA device",
             "check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --backend cpu");
  return std::make_unique<cuda::CudaBackend>();
}

void* cuda_stream(Backend& backend) {
  auto* cuda_backend = dynamic_cast<cuda::CudaBackend*>(&backend);
  FPDT_CHECK(cuda_backend != nullptr, "kernels", "the " + backend.name() + " backend has no CUDA stream",
             "collectives over device memory (NCCL) need --backend cuda");
  return cuda_backend->stream();
}

bool cuda_built() { return true; }

std::string cuda_attention_kernels(Precision precision) {
  return cuda::CudnnSdpa::describe(precision == Precision::bf16);
}

std::string cuda_check_attention_graphs(const AttentionChunkParams& params, int sm_version) {
  const cuda::SdpaDecision decision = cuda::plan_sdpa(params);
  if (!decision.tries_cudnn()) return decision.refusal;
  return cuda::CudnnSdpa::check_without_device(decision.key, sm_version);
}

bool cuda_attention_on_cudnn(Backend& backend, const AttentionChunkParams& params, bool backward) {
  auto* cuda_backend = dynamic_cast<cuda::CudaBackend*>(&backend);
  return cuda_backend != nullptr && cuda_backend->sdpa_takes(params, backward);
}

void load_cuda_libraries() { cuda::cublaslt(); }

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
// cudaMemcpy uses), so the copies first wait for the whole device. A cudaMemcpy from pageable memory returns
// once the bytes are staged, before the DMA to the device has landed: only a launch on the legacy stream
// would be ordered after it, and the backend's is not one — so the upload also waits for the device after it.
void cuda_copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  FPDT_CUDA_CHECK(cudaDeviceSynchronize());
  FPDT_CUDA_CHECK(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
  FPDT_CUDA_CHECK(cudaDeviceSynchronize());
}

void cuda_copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  FPDT_CUDA_CHECK(cudaDeviceSynchronize());
  FPDT_CUDA_CHECK(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
}

void cuda_synchronize() { FPDT_CUDA_CHECK(cudaDeviceSynchronize()); }

void* cuda_pinned_alloc(size_t bytes) {
  void* ptr = nullptr;
  FPDT_CUDA_CHECK(cudaMallocHost(&ptr, bytes));
  return ptr;
}

void cuda_pinned_free(void* host_ptr) noexcept { cudaFreeHost(host_ptr); }

}  // namespace fpdt::kernels

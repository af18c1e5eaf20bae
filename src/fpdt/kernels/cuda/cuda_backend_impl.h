// The CudaBackend class: the Backend interface over DEVICE pointers on the current GPU, fp32 storage;
// GEMMs and attention compute in fp32 or bf16 (ops.h Precision). It owns one stream (every launch and
// cuBLASLt call goes to it), a cuBLASLt handle and workspace, and two scratch buffers (fp32 values, and
// the bf16 copies of GEMM operands). Each op is defined in the .cu file of its family (norm.cu defines
// rmsnorm_forward, linear.cu the GEMMs); construction and the device-memory helpers are in
// cuda_backend.cu. Attention blocks of bf16 runs go to cuDNN's fused attention where it takes them
// (sdpa_attention.cu), the rest to the CUDA-core kernels (attention.cu). Ops return without waiting,
// except sum_squares (a host double: it synchronises).
// Internal to kernels/cuda: it names CUDA types, so only .cu files include it (the rest of the code
// sees cuda_backend.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>

#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/cuda/gemm_plan.h"

namespace fpdt::kernels::cuda {

constexpr int kMaxHeadDim = 256;    // attention.cu: one kernel instantiation per ⌈D/32⌉ up to this
constexpr int kMaxRotaryDim = 512;  // elementwise.cu: the inverse-frequency table goes by value to the kernel
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;  // linear.cu: the cuBLASLt workspace

// Grid-stride launches: kThreads per block, at most 65535·16 blocks.
constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

// linear.cu: the cuBLASLt descriptors and algorithm of each GEMM shape, made on its first call.
struct GemmPlan;
class GemmPlans {
 public:
  GemmPlans();
  ~GemmPlans();
  GemmPlans(const GemmPlans&) = delete;
  GemmPlans& operator=(const GemmPlans&) = delete;
  // The plan of `key`, made (descriptors and the heuristic's algorithm) when first asked for.
  const GemmPlan& find(cublasLtHandle_t handle, const GemmKey& key);

 private:
  std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash> plans_;
};

class CudnnSdpa;  // cudnn_sdpa.h: cuDNN's fused attention, or its stub

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  DeviceMemory& memory() override { return *memory_; }
  cudaStream_t stream() const { return stream_; }
  // sdpa_attention.cu: whether the block's forward (backward) goes to cuDNN (cuda_attention_on_cudnn).
  bool sdpa_takes(const AttentionChunkParams& params, bool backward);

#include "fpdt/kernels/backend_ops.inc"  // every op, as an override

 private:
  // attention.cu: raises the dynamic shared-memory limit of every attention kernel (once, at creation).
  static void configure_attention();
  // sdpa_attention.cu: the block on cuDNN's fused attention (a bf16 run's tensor-core path); false, having
  // done nothing, when plan_sdpa or cuDNN refuses it — then attention.cu's CUDA-core kernel runs it.
  bool sdpa_chunk_forward(float* out, float* lse, const AttentionChunkParams& params, bool accumulate);
  bool sdpa_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse, const float* delta,
                           const AttentionChunkParams& params);
  // Device memory that grows (synchronously, outside the steady state) only when a larger request first
  // arrives; what it held is then lost.
  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };
  void* grow(Scratch& scratch, size_t bytes);
  // Device scratch of at least `floats` floats (attention's Δ, column sums' partial sums).
  float* scratch(size_t floats) { return static_cast<float*>(grow(scratch_, floats * sizeof(float))); }
  // linear.cu: the operands as a GEMM reads them — in fp32 the arrays themselves; in bf16 their copies,
  // rounded to nearest bf16 by one launch into operand_scratch_ (gemm_plan.h bf16_copy_bytes lays them
  // out). operands[i] = (values, count); a null array stays null (an operand the call does not read).
  std::array<const void*, 3> gemm_inputs(Precision precision,
                                         const std::array<std::pair<const float*, int64_t>, 3>& operands);

  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_workspace_ = nullptr;  // kLtWorkspaceBytes
  GemmPlans gemm_plans_;
  double* sum_host_ = nullptr;  // pinned
  Scratch scratch_;
  Scratch operand_scratch_;  // gemm_inputs' bf16 copies
  Scratch sdpa_scratch_;     // sdpa_attention.cu: a block's bf16 operands and outputs, and cuDNN's workspace
  std::unique_ptr<CudnnSdpa> sdpa_;
  std::unique_ptr<DeviceMemory> memory_;  // cuda_memory.cu: buffers, storage and copy streams
};

}  // namespace fpdt::kernels::cuda

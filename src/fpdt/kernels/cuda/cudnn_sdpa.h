// cuDNN's fused attention (SDPA forward and backward through the cuDNN frontend's graph API) for one
// (q chunk, kv chunk) block in bf16 with fp32 statistics: the graphs of each SdpaKey (sdpa_plan.h) are built
// on first use and cached, with cuDNN's refusal cached beside them when it has one. cudnn_sdpa.cpp is the
// real one (CMake builds it when it finds cudnn.h and the frontend's headers); cudnn_sdpa_stub.cpp, with the
// same functions, refuses every block, so the CUDA-core kernel (attention.cu) runs them — never an #ifdef.
// libcudnn itself is opened at run time (dlopen, as cuBLASLt is): a machine without it runs the fallback.
// It does no arithmetic of its own: the operands are the bf16 words sdpa_attention.cu packs, the outputs
// the bf16 words and fp32 statistics it merges; every pointer is device memory, every launch on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fpdt/kernels/cuda/sdpa_plan.h"

namespace fpdt::kernels::cuda {

// One block's forward: o = softmax(scale·q·kᵀ under the key's band)·v, stats = its LSE (natural log).
struct SdpaForwardArgs {
  const uint16_t* q = nullptr;  // (B, Cq, H, D) bf16
  const uint16_t* k = nullptr;  // (B, Ck, Hkv, D) bf16
  const uint16_t* v = nullptr;  // (B, Ck, Hkv, D) bf16
  uint16_t* o = nullptr;        // (B, Cq, H, D) bf16 =
  float* stats = nullptr;       // (B, H, Cq) fp32 =
};

// One block's backward from the merged softmax: lse is the q chunk's final LSE, and `o` any (B, Cq, H, D)
// tensor with rowsum(dO ∘ o) = Δ — cuDNN reads O for that row sum only (its graph: dO·O reduced over D),
// so sdpa_attention.cu gives it one made from Δ. dq, dk, dv are this block's contributions (=, bf16); dk and
// dv are summed over each kv head's GQA group by cuDNN.
struct SdpaBackwardArgs {
  const uint16_t* q = nullptr;   // (B, Cq, H, D) bf16
  const uint16_t* k = nullptr;   // (B, Ck, Hkv, D) bf16
  const uint16_t* v = nullptr;   // (B, Ck, Hkv, D) bf16
  const uint16_t* o = nullptr;   // (B, Cq, H, D) bf16
  const uint16_t* dO = nullptr;  // (B, Cq, H, D) bf16
  const float* lse = nullptr;    // (B, H, Cq) fp32
  uint16_t* dq = nullptr;        // (B, Cq, H, D) bf16 =
  uint16_t* dk = nullptr;        // (B, Ck, Hkv, D) bf16 =
  uint16_t* dv = nullptr;        // (B, Ck, Hkv, D) bf16 =
};

class CudnnSdpa {
 public:
  // On the first block asked for (not here: an fp32 run never loads cuDNN), opens libcudnn (FPDT_CUDNN_LIBRARY,
  // else libcudnn.so.9 on the loader's path, else beside the headers CMake found) and makes a handle on
  // `stream`. Never throws: a failure is the refusal of every block, and so is FPDT_CUDNN_ATTENTION=off in the
  // environment (the CUDA-core kernels run everything).
  explicit CudnnSdpa(cudaStream_t stream);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // What runs the attention of a run (bf16 or fp32) on this machine, short enough for the run's table: cuDNN
  // and its version, or the CUDA-core kernels and why. Opens libcudnn (once per process) to know.
  static std::string describe(bool bf16);

  // Empty when cuDNN runs `key`'s forward (its graph built now or before), else cuDNN's reason — kept, so a
  // refused shape is asked once. *workspace_bytes: the device workspace execute needs.
  std::string prepare_forward(const SdpaKey& key, size_t* workspace_bytes);
  std::string prepare_backward(const SdpaKey& key, size_t* workspace_bytes);
  // Builds `key`'s forward and backward graphs as far as cuDNN goes without a GPU — the frontend's checks and
  // cuDNN's operation graphs, for a GPU of `sm_version` (90: Hopper) — and returns "" or the first error: the
  // CPU tests' proof that the graphs made here are ones cuDNN accepts. Needs libcudnn, not a device.
  static std::string check_without_device(const SdpaKey& key, int sm_version);
  // Queue the prepared graph on the stream. Throws fpdt::Error when cuDNN fails to execute it.
  void forward(const SdpaKey& key, const SdpaForwardArgs& args, void* workspace);
  void backward(const SdpaKey& key, const SdpaBackwardArgs& args, void* workspace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fpdt::kernels::cuda

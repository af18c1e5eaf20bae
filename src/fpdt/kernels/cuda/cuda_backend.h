// The CUDA backend's public face: make_cuda_backend(), cuda_available() and the few device-memory
// helpers tests and benchmarks need. No CUDA type appears here, so any file may include it; in a
// build without CUDA every function comes from cuda_stub.cpp (chosen by CMake) and throws a clear
// fpdt::Error, except cuda_available(), which is false. A CudaBackend's ops take DEVICE pointers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "fpdt/kernels/backend.h"

namespace fpdt::kernels {

// A Backend over device pointers (fp32 storage; GEMMs and attention in fp32 or bf16) on this rank's GPU:
// it sets the device by the launcher's local rank (cuda/device_choice.h; GPU 0 in a plain run). Every launch goes
// to the backend's own stream; the helpers below synchronise with it.
std::unique_ptr<Backend> make_cuda_backend();

// The compute stream (a cudaStream_t) of a backend make_cuda_backend() made: what comm::make_nccl
// queues its collectives on. Throws fpdt::Error for another backend, or in a build without CUDA.
void* cuda_stream(Backend& backend);

// True when this build has CUDA and a usable device is present (never throws).
bool cuda_available();

// The current device's name as the driver reports it ("NVIDIA H200"); the trainer's MFU divides by
// the peak stated for it (train/device_peaks.h).
std::string cuda_device_name();

// True when this build has the CUDA backend (a device may still be missing).
bool cuda_built();
// What runs the attention of a `precision` run on the CUDA backend, for the run's table: cuDNN's fused
// attention (bf16 runs, where libcudnn loads; the CUDA-core kernels for the blocks it refuses) or the CUDA-core
// kernels and why (kernels/cuda/cudnn_sdpa.h). Needs no device.
std::string cuda_attention_kernels(Precision precision);
// Whether `backend` (one make_cuda_backend() made) runs block `params`'s forward — or, with `backward`, its
// backward — on cuDNN's fused attention: plan_sdpa's decision (cuda/sdpa_plan.h) and cuDNN's answer for the
// shape, its graph built now if it was not. The conformance rows pick their bounds by it. False for another
// backend and in builds without CUDA or cuDNN.
bool cuda_attention_on_cudnn(Backend& backend, const AttentionChunkParams& params, bool backward);
// The cuDNN graphs of block `params` built as far as they go without a GPU, for one of compute capability
// `sm_version` (cuda/cudnn_sdpa.h check_without_device): "" when cuDNN accepts both, else why not (the
// block is not cuDNN's by sdpa_plan.h, no libcudnn, a build without cuDNN or CUDA). Needs no device.
std::string cuda_check_attention_graphs(const AttentionChunkParams& params, int sm_version);
// Loads the libraries the backend opens at run time rather than links (cuBLASLt:
// cuda/cublaslt_library.h), as the first make_cuda_backend() does; needs no device. Throws
// fpdt::Error when one cannot be loaded, or in a build without CUDA.
void load_cuda_libraries();

// Device memory for tests, benchmarks and (later) the compute tier. All throw fpdt::Error on failure.
void* cuda_device_alloc(size_t bytes);
void cuda_device_free(void* device_ptr) noexcept;
// Synchronous: the bytes are in place, for every stream, when it returns.
void cuda_copy_to_device(void* device_dst, const void* host_src, size_t bytes);
void cuda_copy_to_host(void* host_dst, const void* device_src, size_t bytes);    // synchronous
void cuda_synchronize();  // waits for every stream of the current device
// Pinned (page-locked) host memory, as the offload tier's (tests of the copies from it).
void* cuda_pinned_alloc(size_t bytes);
void cuda_pinned_free(void* host_ptr) noexcept;

}  // namespace fpdt::kernels

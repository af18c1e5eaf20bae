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
// Loads the libraries the backend opens at run time rather than links (cuBLASLt:
// cuda/cublaslt_library.h), as the first make_cuda_backend() does; needs no device. Throws
// fpdt::Error when one cannot be loaded, or in a build without CUDA.
void load_cuda_libraries();

// Device memory for tests, benchmarks and (later) the compute tier. All throw fpdt::Error on failure.
void* cuda_device_alloc(size_t bytes);
void cuda_device_free(void* device_ptr) noexcept;
void cuda_copy_to_device(void* device_dst, const void* host_src, size_t bytes);  // synchronous
void cuda_copy_to_host(void* host_dst, const void* device_src, size_t bytes);    // synchronous
void cuda_synchronize();  // waits for every stream of the current device

}  // namespace fpdt::kernels

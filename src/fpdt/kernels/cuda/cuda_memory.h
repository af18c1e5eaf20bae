// The CUDA backend's memory (device_memory.h): compute-tier buffers in device memory, offload storage
// in the device itself (none) or pinned host RAM (ram), and copy queues that are streams of their own,
// ordered with the compute stream by events. Compiled with the CUDA backend; not yet run on a GPU.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "fpdt/kernels/device_memory.h"

namespace fpdt::kernels::cuda {

// Memory whose compute-tier operations run on `compute` (the backend's stream).
std::unique_ptr<DeviceMemory> make_device_memory(cudaStream_t compute);

}  // namespace fpdt::kernels::cuda

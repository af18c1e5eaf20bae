// The hint of a failed CUDA runtime call, chosen by the error's name (cudaGetErrorName) — free of CUDA
// types, so the CPU tests check it: running out of device memory asks for a smaller chunk or more
// offloading, not for a visible GPU; a missing device or driver asks for those; an illegal address or a
// launch failure for a synchronous rerun that names the kernel. base/cuda_check.h puts it in the error.
#pragma once

#include <string>

namespace fpdt {

inline std::string cuda_error_hint(const std::string& error_name) {
  if (error_name == "cudaErrorMemoryAllocation")
    return "the GPU is out of memory: use smaller chunks (--chunk-tokens or more --chunks), keep the chunks "
           "offloaded (--offload ram) or a higher --zero stage; nvidia-smi shows what else holds its memory";
  if (error_name == "cudaErrorNoDevice" || error_name == "cudaErrorInvalidDevice")
    return "check that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES)";
  if (error_name == "cudaErrorInsufficientDriver" || error_name == "cudaErrorSystemDriverMismatch" ||
      error_name == "cudaErrorCompatNotSupportedOnDevice")
    return "the driver is older than this CUDA version: update the driver or build with the toolkit it supports";
  if (error_name == "cudaErrorNoKernelImageForDevice" || error_name == "cudaErrorUnsupportedPtxVersion")
    return "fpdt was built for another GPU architecture: reconfigure with -DCMAKE_CUDA_ARCHITECTURES=<this GPU's>";
  if (error_name == "cudaErrorIllegalAddress" || error_name == "cudaErrorLaunchFailure" ||
      error_name == "cudaErrorMisalignedAddress")
    return "a kernel failed; rerun with CUDA_LAUNCH_BLOCKING=1 (and compute-sanitizer) to name it";
  return "check that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES) and that the driver supports this CUDA "
         "version";
}

}  // namespace fpdt

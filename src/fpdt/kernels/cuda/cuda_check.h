// Checks for every CUDA runtime and cuBLAS(Lt) call: on failure they throw fpdt::Error naming the
// statement, the library's error string, file and line. One pattern for all foreign calls
// (STYLE.md 9). Also the launch check (cudaGetLastError after a <<<>>>).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "fpdt/base/error.h"

namespace fpdt::kernels::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* statement, const char* file, int line) {
  throw ::fpdt::Error("cuda",
                      std::string(statement) + " failed: " + cudaGetErrorName(status) + " (" +
                          cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line),
                      "check that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES) and that the driver "
                      "supports this CUDA version");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* statement, const char* file,
                                            int line) {
  throw ::fpdt::Error("cuda",
                      std::string(statement) + " failed: cuBLAS status " + std::to_string(static_cast<int>(status)) +
                          " at " + file + ":" + std::to_string(line),
                      "an unsupported shape or type for cuBLASLt, or out of device memory");
}

}  // namespace fpdt::kernels::cuda

#define FPDT_CUDA_CHECK(statement)                                                              \
  do {                                                                                          \
    const cudaError_t fpdt_cuda_status_ = (statement);                                          \
    if (fpdt_cuda_status_ != cudaSuccess)                                                       \
      ::fpdt::kernels::cuda::throw_cuda_error(fpdt_cuda_status_, #statement, __FILE__, __LINE__); \
  } while (0)

#define FPDT_CUBLAS_CHECK(statement)                                                                \
  do {                                                                                              \
    const cublasStatus_t fpdt_cublas_status_ = (statement);                                         \
    if (fpdt_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::fpdt::kernels::cuda::throw_cublas_error(fpdt_cublas_status_, #statement, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports a bad launch configuration at once (not at the next sync).
#define FPDT_CUDA_CHECK_LAUNCH() FPDT_CUDA_CHECK(cudaGetLastError())

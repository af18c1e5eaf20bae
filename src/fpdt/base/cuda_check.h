// The check for every CUDA runtime call: on failure it throws fpdt::Error naming the statement, the
// runtime's error string, file and line (one pattern for all foreign calls, STYLE.md 9), with the hint of
// that error (base/cuda_hints.h); and the launch check (cudaGetLastError after a <<<>>>). For the layers
// that call the CUDA runtime — kernels/cuda and comm/nccl — so it lives below both; only code built with
// the CUDA toolkit includes it (base itself compiles no CUDA). cuBLAS's check is kernels/cuda/cublas_check.h.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "fpdt/base/cuda_hints.h"
#include "fpdt/base/error.h"

namespace fpdt {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* statement, const char* file, int line) {
  throw Error("cuda",
              std::string(statement) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                  ") at " + file + ":" + std::to_string(line),
              cuda_error_hint(cudaGetErrorName(status)));
}

}  // namespace fpdt

#define FPDT_CUDA_CHECK(statement)                                                  \
  do {                                                                              \
    const cudaError_t fpdt_cuda_status_ = (statement);                              \
    if (fpdt_cuda_status_ != cudaSuccess)                                           \
      ::fpdt::throw_cuda_error(fpdt_cuda_status_, #statement, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports a bad launch configuration at once (not at the next sync).
#define FPDT_CUDA_CHECK_LAUNCH() FPDT_CUDA_CHECK(cudaGetLastError())

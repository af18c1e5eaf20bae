// The check for every cuBLAS(Lt) call: on failure it throws fpdt::Error naming the statement, the
// status, file and line — the cuBLAS side of base/cuda_check.h (STYLE.md 9), for kernels/cuda alone.
#pragma once

#include <cublasLt.h>

#include <string>

#include "fpdt/base/error.h"

namespace fpdt::kernels::cuda {

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* statement, const char* file,
                                            int line) {
  throw ::fpdt::Error("cuda",
                      std::string(statement) + " failed: cuBLAS status " + std::to_string(static_cast<int>(status)) +
                          " at " + file + ":" + std::to_string(line),
                      "an unsupported shape or type for cuBLASLt, or out of device memory");
}

}  // namespace fpdt::kernels::cuda

#define FPDT_CUBLAS_CHECK(statement)                                                                \
  do {                                                                                              \
    const cublasStatus_t fpdt_cublas_status_ = (statement);                                         \
    if (fpdt_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::fpdt::kernels::cuda::throw_cublas_error(fpdt_cublas_status_, #statement, __FILE__, __LINE__); \
  } while (0)

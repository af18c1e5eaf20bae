// cuBLASLt, loaded when the CUDA backend first needs it instead of linked into every fpdt process.
// The library is ~500 MB and its initialisers leave ~210 MB resident in any process that loads it:
// an empty program linked with -lcublasLt peaks at 211 MB RSS, without it at 1 MB. Linked, every
// fpdt process paid that on the CPU too (`fpdt plan --help` 219 MB). Loaded here, only a process that
// makes a CudaBackend does. The functions fpdt calls are resolved once, by name, from the library of
// the toolkit fpdt was built with (libcublasLt.so.<major>), searched as the dynamic loader searches,
// then beside the CUDA runtime this program is linked with (the toolkit keeps both in one folder).
// Internal to kernels/cuda (it names cuBLASLt types): only .cu files include it.
#pragma once

#include <cublasLt.h>

namespace fpdt::kernels::cuda {

// The cuBLASLt functions fpdt calls, once: X(member, symbol) for each.
#define FPDT_CUBLASLT_FUNCTIONS(X)                                          \
  X(create, cublasLtCreate)                                                 \
  X(destroy, cublasLtDestroy)                                               \
  X(matmul, cublasLtMatmul)                                                 \
  X(matmul_algo_get_heuristic, cublasLtMatmulAlgoGetHeuristic)              \
  X(matmul_desc_create, cublasLtMatmulDescCreate)                           \
  X(matmul_desc_destroy, cublasLtMatmulDescDestroy)                         \
  X(matmul_desc_set_attribute, cublasLtMatmulDescSetAttribute)              \
  X(matmul_preference_create, cublasLtMatmulPreferenceCreate)               \
  X(matmul_preference_destroy, cublasLtMatmulPreferenceDestroy)             \
  X(matmul_preference_set_attribute, cublasLtMatmulPreferenceSetAttribute)  \
  X(matrix_layout_create, cublasLtMatrixLayoutCreate)                       \
  X(matrix_layout_destroy, cublasLtMatrixLayoutDestroy)

// One pointer per function, with the library's own signature.
struct CublasLtLibrary {
#define FPDT_CUBLASLT_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  FPDT_CUBLASLT_FUNCTIONS(FPDT_CUBLASLT_MEMBER)
#undef FPDT_CUBLASLT_MEMBER
};

// Loads the library on the first call (thread-safe) and returns its functions; throws fpdt::Error
// naming the library, the folders tried and the loader's message when it cannot be loaded or lacks a
// function (the next call then tries again). Later calls return the same functions.
const CublasLtLibrary& cublaslt();

}  // namespace fpdt::kernels::cuda

// cpu/onednn_gemm.h in a build without oneDNN (CMake found no libdnnl): nothing is available, and the
// GEMM layer (cpu/gemm.cpp) runs every product on OpenBLAS instead; matmul is never reached there.
#include "fpdt/base/error.h"
#include "fpdt/kernels/cpu/onednn_gemm.h"

namespace fpdt::kernels::cpu::onednn {

bool available() { return false; }

std::string version() { return ""; }

void matmul(Input, bool, bool, int, int, int, const void*, int, const void*, int, bool, float*, int) {
  throw Error("internal", "onednn::matmul called in a build without oneDNN (gemm.cpp checks available() first)");
}

std::string implementation(Input, bool, bool, int, int, int) { return ""; }

}  // namespace fpdt::kernels::cpu::onednn

// The CUDA backend's heavy library, cuBLASLt, is opened only when the backend asks for it: a process
// that never makes a CudaBackend (every CPU run) does not map it — loaded, it left ~210 MB resident in
// every fpdt process. Where this build has the CUDA backend and the toolkit is installed (no GPU
// needed), loading it then maps it and resolves every function fpdt calls.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/cuda_backend.h"

namespace fpdt::kernels {
namespace {

bool process_maps(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  const std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  return text.find(library) != std::string::npos;
}

TEST(CudaLibraries, CublasLtIsOpenedOnlyWhenTheBackendLoadsIt) {
  ASSERT_FALSE(process_maps("libcublasLt")) << "cuBLASLt mapped before anything asked for it";
  if (!cuda_built()) {
    EXPECT_THROW(load_cuda_libraries(), Error);
    EXPECT_FALSE(process_maps("libcublasLt"));
    return;
  }
  load_cuda_libraries();  // throws, naming the library and what was tried, if the toolkit is missing
  EXPECT_TRUE(process_maps("libcublasLt"));
  load_cuda_libraries();  // the second call reuses the first's functions
}

}  // namespace
}  // namespace fpdt::kernels

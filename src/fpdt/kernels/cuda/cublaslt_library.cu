// cuBLASLt by dlopen (see cublaslt_library.h).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/cublaslt_library.h"

namespace fpdt::kernels::cuda {

namespace {

const std::string kSoname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

// The folder of the CUDA runtime this program runs with ("" when unknown), where the toolkit also
// keeps cuBLASLt.
std::string cuda_runtime_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cudaGetErrorString), &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

CublasLtLibrary load() {
  void* handle = dlopen(kSoname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string tried = kSoname + " (" + (handle ? "found" : dlerror()) + ")";
  const std::string folder = cuda_runtime_folder();
  if (handle == nullptr && !folder.empty()) {
    const std::string beside_runtime = folder + "/" + kSoname;
    handle = dlopen(beside_runtime.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) tried += ", " + beside_runtime + " (" + dlerror() + ")";
  }
  if (handle == nullptr)
    throw Error("cuda", "cannot load cuBLASLt: tried " + tried,
                "install the CUDA toolkit's cuBLAS (or add its lib folder to LD_LIBRARY_PATH)");
  CublasLtLibrary library;
  auto resolve = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
    if (function == nullptr)
      throw Error("cuda", "cuBLASLt (" + kSoname + ") has no function " + name,
                  "the library is older than the toolkit fpdt was built with; rebuild against it");
  };
#define FPDT_CUBLASLT_RESOLVE(member, symbol) resolve(library.member, #symbol);
  FPDT_CUBLASLT_FUNCTIONS(FPDT_CUBLASLT_RESOLVE)
#undef FPDT_CUBLASLT_RESOLVE
  return library;  // the handle stays open for the life of the process
}

}  // namespace

const CublasLtLibrary& cublaslt() {
  static const CublasLtLibrary library = load();  // a throw leaves it unset: the next call tries again
  return library;
}

}  // namespace fpdt::kernels::cuda

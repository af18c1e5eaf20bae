// Backend selection by name.
#include "fpdt/kernels/backend.h"

#include "fpdt/base/error.h"

namespace fpdt::kernels {

std::unique_ptr<Backend> make_reference_backend();  // reference/reference_backend.cpp
std::unique_ptr<Backend> make_cpu_backend();        // cpu/cpu_backend.cpp
std::unique_ptr<Backend> make_cuda_backend();       // cuda/cuda_backend.cu (cuda/cuda_stub.cpp without CUDA)

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "reference") return make_reference_backend();
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") return make_cuda_backend();
  throw Error("kernels", "unknown backend '" + name + "'",
              "use --backend cpu, --backend reference or --backend cuda");
}

}  // namespace fpdt::kernels

// Backend selection by name.
#include "fpdt/kernels/backend.h"

#include "fpdt/base/error.h"
#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cuda/cuda_backend.h"
#include "fpdt/kernels/guarded/guarded_backend.h"
#include "fpdt/kernels/reference/reference_backend.h"

namespace fpdt::kernels {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "reference") return std::make_unique<reference::ReferenceBackend>();
  if (name == "cpu") return std::make_unique<cpu::CpuBackend>();
  if (name == "cuda") return make_cuda_backend();  // cuda/cuda_backend.cu (cuda/cuda_stub.cpp without CUDA)
  if (name == "cpu-guarded") return std::make_unique<GuardedBackend>();
  throw Error("kernels", "unknown backend '" + name + "'",
              "use --backend cpu, --backend reference, --backend cuda or --backend cpu-guarded");
}

}  // namespace fpdt::kernels

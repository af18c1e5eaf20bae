// Backend selection by kind.
#include "fpdt/kernels/backend.h"

#include "fpdt/base/error.h"
#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cuda/cuda_backend.h"
#include "fpdt/kernels/guarded/guarded_backend.h"
#include "fpdt/kernels/reference/reference_backend.h"

namespace fpdt::kernels {

std::unique_ptr<Backend> make_backend(BackendKind kind) {
  switch (kind) {
    case BackendKind::reference: return std::make_unique<reference::ReferenceBackend>();
    case BackendKind::cpu: return std::make_unique<cpu::CpuBackend>();
    case BackendKind::cuda: return make_cuda_backend();  // cuda/cuda_backend.cu (cuda/cuda_stub.cpp without CUDA)
    case BackendKind::cpu_guarded: return std::make_unique<GuardedBackend>();
  }
  throw Error("kernels", "unknown backend kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace fpdt::kernels

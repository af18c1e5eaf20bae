// The kernel interface the model computes through. A Backend is one implementation of every op
// (fp32): `reference` runs the scalar spec kernels, `cpu` the fast ones, `cuda` GPU kernels on device
// pointers (built when nvcc is found), `cpu-guarded` the cpu kernels over compute-tier memory the
// host cannot read (the CPU's proof that the pipeline never dereferences it, as a GPU needs).
// The model never names a kernel namespace, so a faster attention or a GPU backend drops in here.
// The ops are listed once, in backend_ops.inc; their parameter structs are in ops.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fpdt/kernels/device_memory.h"
#include "fpdt/kernels/ops.h"

namespace fpdt::kernels {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The memory this backend computes in, and its copies between tiers (device_memory.h).
  virtual DeviceMemory& memory() = 0;

#define FPDT_BACKEND_OP(...) virtual __VA_ARGS__ = 0;
#include "fpdt/kernels/backend_ops.inc"  // every op (it undefines FPDT_BACKEND_OP)
};

// The kernels a run computes with: reference (the scalar spec), cpu, cuda (device pointers;
// kernels/cuda, a clear error in builds without CUDA) or cpu_guarded (the cpu kernels over memory only
// the backend can read: guarded/guarded_backend.h). Their words are the run spec's (pipeline/run_spec.h).
enum class BackendKind : uint8_t { cpu, reference, cuda, cpu_guarded };
std::unique_ptr<Backend> make_backend(BackendKind kind);

}  // namespace fpdt::kernels

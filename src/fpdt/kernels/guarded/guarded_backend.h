// The `cpu-guarded` Backend: the cpu kernels over guarded_memory(), whose compute tier the code outside
// the backend cannot read (guarded_memory.h). Each op translates its pointer operands to their readable
// mappings and runs CpuBackend's op, so results are the cpu backend's, bit for bit; a host dereference of
// compute-tier memory anywhere else — what would crash on a GPU — is a SIGSEGV here. The stand-in for
// one GPU: `fpdt train/eval --backend cpu-guarded` runs what `--backend cuda` runs (one rank, no
// offloaded optimizer: train/settings.h check_runnable).
#pragma once

#include "fpdt/kernels/cpu/cpu_backend.h"

namespace fpdt::kernels {

class GuardedBackend final : public Backend {
 public:
  std::string name() const override { return "cpu-guarded"; }
  DeviceMemory& memory() override;

#include "fpdt/kernels/backend_ops.inc"  // every op, as an override

 private:
  cpu::CpuBackend cpu_;
};

}  // namespace fpdt::kernels

// The `reference` Backend: every op runs the scalar spec kernel (reference/<family>.h) in fp32. Slow;
// used by tests to prove the model's wiring independently of the fast kernels. Each op is defined
// at the end of its family's file (reference/norm.cpp defines rmsnorm_forward), next to the kernel.
#pragma once

#include "fpdt/kernels/backend.h"

namespace fpdt::kernels::reference {

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  DeviceMemory& memory() override { return host_memory(); }

#include "fpdt/kernels/backend_ops.inc"  // every op, as an override
};

}  // namespace fpdt::kernels::reference

// The `cpu-guarded` backend's memory: host memory whose compute tier the pipeline cannot read, so a
// host dereference of compute-tier memory that would crash on a GPU crashes here (SIGSEGV). Each
// compute-tier allocation is one memfd mapped twice: the handle callers get points into a PROT_NONE
// view, and only the guarded backend's ops and this memory's copies reach the bytes, through a second,
// readable mapping of the same pages (translate). A new buffer holds 0xFF bytes (NaN floats), not zeros:
// a read of device memory nothing wrote poisons the results. Offload storage of kind ram and disk is
// host_memory()'s.
// A test mode (tests/kernels/guarded_memory_test.cpp, tests/cli/guarded_test.cpp); not a fast path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <thread>

#include "fpdt/kernels/device_memory.h"

namespace fpdt::kernels {

// The process's guarded memory (one, like host_memory()).
DeviceMemory& guarded_memory();
// Whether `thread` has called guarded_memory().bind_thread(): what a CUDA thread other than the backend's
// must do before it computes (cudaSetDevice), checked on the CPU (tests/kernels/guarded_memory_test.cpp).
bool guarded_thread_bound(std::thread::id thread);
size_t guarded_bound_threads();  // how many threads have, so far

// The readable address of the byte a compute-tier handle of guarded_memory() names; any other pointer
// (host memory, null) unchanged. Only the guarded backend and guarded_memory() call it.
const void* guarded_readable(const void* handle);
template <typename T>
T* guarded_readable(T* handle) {
  return static_cast<T*>(const_cast<void*>(guarded_readable(static_cast<const void*>(handle))));
}

}  // namespace fpdt::kernels

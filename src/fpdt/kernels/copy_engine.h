// The copy engine: one in-order queue of copies between compute-tier buffers and offload storage, and
// the events compute waits on — what lets FPDT fetch the next chunk and write the last one out while
// the current one computes. Each backend's memory makes its queues (DeviceMemory::make_copy_queue):
// the host's is here (copy_engine.cpp: one thread, base/work_queue.h), CUDA's a copy stream ordered
// with the compute stream by events (cuda/cuda_memory.cu).
//
// Ordering. A queue runs its copies in submission order (FIFO); a copy starts after everything
// submitted to compute before it, and compute submitted after wait(event) starts after that copy and
// every copy queued before it. (CPU: compute is synchronous and wait blocks; CUDA: the compute stream
// waits on the copy's event, the host does not.) So a fetch queued after a write of the same slot reads
// what was written, and a program's waits (pipeline/schedule.h) need only name the latest copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace fpdt::kernels {

class OffloadStorage;  // device_memory.h

// 0 is an event that has always happened.
using CopyEvent = uint64_t;

// One in-order queue of copies (see the top of the file for the ordering). Handles are compute-tier
// buffers of transfer_bytes(bytes) capacity; offsets are multiples of kTransferAlignBytes. A failed
// copy (a full disk) is rethrown as an fpdt::Error by the next wait.
class CopyQueue {
 public:
  virtual ~CopyQueue() = default;
  virtual CopyEvent write(OffloadStorage& storage, size_t offset, const void* src, size_t bytes) = 0;
  virtual CopyEvent read(void* dst, const OffloadStorage& storage, size_t offset, size_t bytes) = 0;
  // Until `event` and every copy queued before it have finished.
  virtual void wait(CopyEvent event) = 0;
  virtual void wait_all() = 0;
};

// Offload storage the host engine reaches: synchronous moves of its bytes, which the engine's thread
// makes (host RAM, a file: host_memory.cpp).
class HostMoves {
 public:
  virtual void write(size_t offset, const void* src, size_t bytes) = 0;
  virtual void read(size_t offset, void* dst, size_t bytes) const = 0;

 protected:
  ~HostMoves() = default;
};

// The host's copy engine: one thread runs the copies in order and counts them as events; a wait blocks
// the caller. Its storage is OffloadStorage that is also HostMoves.
std::unique_ptr<CopyQueue> make_host_copy_queue();

}  // namespace fpdt::kernels

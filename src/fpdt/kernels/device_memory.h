// The memory a Backend owns besides its maths: compute-tier buffers, offload-tier storage and the
// copy engine that moves bytes between the two (copy_engine.h). Callers hold handles — compute-tier
// addresses they pass on but never dereference (device addresses on a GPU) and OffloadStorage
// objects — so code written against this header (the FPDT pipeline, the Ulysses exchange) runs
// wherever the compute tier is not host memory. The CPU implementation is host_memory.cpp.
//
// Ordering. Compute-tier operations here (fill_zero, copy, copy_2d, upload) run in order with the
// backend's kernels; copies through the copy engine are ordered with them as copy_engine.h says.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fpdt/kernels/copy_engine.h"

namespace fpdt::kernels {

// Where offloaded chunks rest: none — the compute tier itself (everything resident); ram — host RAM
// (pinned on a GPU); disk — one file in `directory`, unlinked at creation so nothing is left behind.
enum class OffloadKind { none, ram, disk };
struct OffloadConfig {
  OffloadKind kind = OffloadKind::ram;
  std::string directory;  // disk only
};

// Transfers between the tiers move whole multiples of this (the O_DIRECT block): compute-tier buffers
// taking part in them are allocated with transfer_bytes() capacity, aligned to it, and storage slots
// start at multiples of it.
constexpr size_t kTransferAlignBytes = 4096;
constexpr size_t transfer_bytes(size_t bytes) {
  return (bytes + kTransferAlignBytes - 1) / kTransferAlignBytes * kTransferAlignBytes;
}

// Compute-tier bytes, counted in Tier::compute while alive. data() is a handle: pass it to the
// backend's operations, never dereference it. Aligned to kTransferAlignBytes.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 protected:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}

 private:
  void* data_;
  size_t bytes_;
};

// Offload-tier storage of bytes() bytes that its user lays out in slots (at transfer-aligned offsets).
class OffloadStorage {
 public:
  virtual ~OffloadStorage() = default;
  size_t bytes() const { return bytes_; }
  // Kind none: the storage is compute-tier memory, used in place — the handle of the byte at
  // `offset`. Null for the other kinds, whose bytes are reached through the copy engine.
  virtual void* resident(size_t offset) const = 0;

 protected:
  explicit OffloadStorage(size_t bytes) : bytes_(bytes) {}

 private:
  size_t bytes_;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // Compute-tier bytes; throws fpdt::Error naming `what` (with `hint`) past the tier's budget.
  virtual std::unique_ptr<DeviceBuffer> allocate(size_t bytes, const std::string& what,
                                                 const std::string& hint) = 0;
  // Offload storage of `bytes` of the given kind (none: in the compute tier). dry: counted in its
  // tier, nothing allocated or created (--dry-run); such storage must not be copied to or from.
  // Throws fpdt::Error naming the tier past its budget, or the directory it cannot use.
  virtual std::unique_ptr<OffloadStorage> allocate_offload(const OffloadConfig& config, size_t bytes, bool dry,
                                                           const std::string& what) = 0;
  // A new queue of the copy engine (copy_engine.h; the CPU backend: a thread; CUDA: a stream).
  virtual std::unique_ptr<CopyQueue> make_copy_queue() = 0;
  // Makes the calling thread compute on this memory's device: a thread other than the one that made the
  // backend calls it before it calls the backend's ops or this memory's (ZeRO's worker threads: WorkQueue's
  // on_start). CUDA: cudaSetDevice to the backend's GPU (a new thread starts on GPU 0, whichever the backend
  // took); the host: nothing.
  virtual void bind_thread() {}

  // Compute-tier operations, in order with the kernels. dst, src: compute-tier handles. Zero bytes
  // touch nothing, and then any pointer may be null (a ZeRO rank may own none of a unit).
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // `rows` rows of `row_bytes`, the rows `src_pitch` and `dst_pitch` bytes apart.
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                       size_t rows) = 0;
  // Host bytes into the compute tier; `host` may be reused when this returns.
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  // Compute-tier bytes to the host, after the compute queued before it; the bytes are there on return.
  virtual void download(void* host, const void* src, size_t bytes) = 0;
};

// The host implementation (host_memory.cpp): compute tier = RAM under its budget; its copy queues are
// the host copy engine's (a thread); disk storage is read and written with pread/pwrite (O_DIRECT where
// the file system allows).
DeviceMemory& host_memory();

}  // namespace fpdt::kernels

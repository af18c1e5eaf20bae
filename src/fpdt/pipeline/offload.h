// The offload tier and the copy engine. An OffloadStore holds arrays of fixed-size chunk slots
//   none — in the compute tier itself (everything resident: the baseline the paper beats),
//   ram  — host RAM counted in Tier::offload,
//   disk — one file in a directory (O_DIRECT where the file system allows it), unlinked at open so
//          nothing is left behind, counted in Tier::offload as well,
// and moves slots to and from compute-tier buffers. The CopyEngine runs those moves on its own
// thread, in order, and hands back events that compute waits on (never sleeps or polls).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fpdt/tensor/memory.h"

namespace fpdt::pipeline {

enum class OffloadKind { none, ram, disk };

struct OffloadConfig {
  OffloadKind kind = OffloadKind::ram;
  std::string directory;  // disk only
};

// "none", "ram" or "disk:DIR"; throws fpdt::Error otherwise.
OffloadConfig parse_offload(const std::string& text);
std::string offload_name(const OffloadConfig& config);

// Transfers to and from the store are whole multiples of this (the O_DIRECT block); compute-tier
// buffers that take part in transfers are allocated with chunk_buffer_bytes() capacity.
constexpr size_t kTransferAlignBytes = 4096;
constexpr size_t chunk_buffer_bytes(size_t bytes) {
  return (bytes + kTransferAlignBytes - 1) / kTransferAlignBytes * kTransferAlignBytes;
}

class OffloadStore {
 public:
  explicit OffloadStore(const OffloadConfig& config);
  ~OffloadStore();
  OffloadStore(const OffloadStore&) = delete;
  OffloadStore& operator=(const OffloadStore&) = delete;

  // Adds an array of `slots` slots of `floats` floats each and returns its id. All arrays are added
  // before the first transfer (the storage is laid out once).
  int add_array(const std::string& name, int64_t slots, int64_t floats);
  // Allocates the storage of every array added so far. Throws fpdt::Error naming the tier when it
  // does not fit the tier's limit, or the directory when the file cannot be created or grown.
  // dry: only count the bytes in their tier (for --dry-run: no memory, no file, no transfers).
  void allocate(bool dry = false);

  // With OffloadKind::none the slots live in the compute tier and are read in place: the pointer to
  // a slot; null for the other kinds (their slots are copied into compute-tier buffers).
  float* resident(int array, int64_t slot) const;
  bool resident() const { return config_.kind == OffloadKind::none; }

  // Synchronous moves of one slot (the CopyEngine runs them on its thread). src/dst must be
  // compute-tier buffers of chunk_buffer_bytes(floats · 4) capacity, 4096-byte aligned.
  void write(int array, int64_t slot, const float* src);
  void read(int array, int64_t slot, float* dst) const;

  int64_t slot_floats(int array) const { return arrays_.at(array).floats; }
  size_t stored_bytes() const { return total_bytes_; }
  const OffloadConfig& config() const { return config_; }

 private:
  struct Array {
    std::string name;
    int64_t slots;
    int64_t floats;
    size_t slot_bytes;    // floats·4 rounded up to kTransferAlignBytes
    size_t offset_bytes;  // of slot 0 in the storage
  };
  OffloadConfig config_;
  std::vector<Array> arrays_;
  size_t total_bytes_ = 0;
  Buffer memory_;          // none / ram
  int fd_ = -1;            // disk
  bool direct_io_ = false; // disk opened with O_DIRECT
  std::string file_path_;
  Tier accounted_tier_ = Tier::offload;
  size_t accounted_bytes_ = 0;  // bytes counted without a Buffer (disk, or a dry run)
};

// One copy thread with a FIFO queue. submit() returns an event; wait(event) blocks until that copy
// (and all before it) finished, and rethrows its error (e.g. a full disk) as an fpdt::Error.
class CopyEngine {
 public:
  using Event = uint64_t;
  CopyEngine();
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  Event submit(std::function<void()> copy);
  void wait(Event event);
  void wait_all() { wait(submitted_); }

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<std::function<void()>> queue_;
  Event submitted_ = 0;
  Event completed_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace fpdt::pipeline

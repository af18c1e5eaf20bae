// The offload store: the pipeline's arrays of chunk slots (memory_layout.h) in one piece of offload
// storage that the backend owns — none: in the compute tier, used in place; ram: host RAM; disk: one
// file — addressed by (array, layer, chunk). It moves nothing itself: copies go through the backend's
// copy queue (kernels/device_memory.h), and nothing here touches the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fpdt/base/checked_math.h"
#include "fpdt/kernels/device_memory.h"
#include "fpdt/pipeline/memory_layout.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/pipeline/schedule.h"

namespace fpdt::pipeline {


class OffloadStore {
 public:
  // Lays out store_arrays(shape) and allocates them in one piece: each array's slots in (layer, chunk)
  // order, the two arrays whose slots another one shares (ArraySpec::in_slots_of) slot by slot side by
  // side, and that one in their pairs. dry: counted in the tier only
  // (--dry-run). Throws fpdt::Error naming the tier when it does not fit its limit, or the directory
  // when the file cannot be created or grown.
  OffloadStore(kernels::DeviceMemory& memory, const OffloadConfig& config, const LayoutShape& shape, bool dry);

  // Byte offset of the slot of (array, layer, chunk) in storage(); an array that keeps n layers
  // holds layer l in the slots of l mod n (one layer: the layer is ignored).
  size_t offset(Array array, int layer, int chunk) const;
  // Bytes one slot holds (what a copy moves; the slot itself is rounded up to the transfer block).
  size_t slot_bytes(Array array) const { return arrays_[static_cast<size_t>(array)].bytes; }
  // With OffloadKind::none: the compute-tier handle of the slot; null for the other kinds.
  void* resident(Array array, int layer, int chunk) const { return storage_->resident(offset(array, layer, chunk)); }
  bool resident() const { return config_.kind == OffloadKind::none; }

  kernels::OffloadStorage& storage() { return *storage_; }
  size_t stored_bytes() const { return storage_->bytes(); }
  const OffloadConfig& config() const { return config_; }

 private:
  struct Placed {
    size_t offset;      // of slot 0
    size_t slot_bytes;  // rounded to the transfer block
    size_t stride;      // from one slot to the next: slot_bytes, or a pair's (ArraySpec::in_slots_of)
    size_t bytes;       // elements · element size
    int64_t layers;
    int64_t chunks;     // slots per layer
  };
  OffloadConfig config_;
  std::vector<Placed> arrays_;  // by Array
  std::unique_ptr<kernels::OffloadStorage> storage_;
};

// Bytes moved between the compute tier and the offload store: fetched from it (read) and written to it.
struct OffloadTraffic {
  uint64_t read_bytes = 0;
  uint64_t written_bytes = 0;
  bool overflow = false;  // the bytes passed 2^64 (a dry run of an extreme length): the counts above are not them
  OffloadTraffic& operator+=(const OffloadTraffic& other) {
    overflow = overflow || other.overflow || !checked_add(read_bytes, read_bytes, other.read_bytes) ||
               !checked_add(written_bytes, written_bytes, other.written_bytes);
    return *this;
  }
  bool operator==(const OffloadTraffic&) const = default;
};

// What executing `schedule` moves through `store`: each fetch and write of its calls' programs, one
// slot each (none with a resident store: its fetches read in place). A block the mask removed fetches
// nothing, so this is the traffic a sliding window or document mask leaves.
OffloadTraffic schedule_traffic(const Schedule& schedule, const OffloadStore& store);
// The same from the copies counted (count_copies: a dry run's, without the schedule).
OffloadTraffic schedule_traffic(const ScheduleCopies& copies, const OffloadStore& store);

}  // namespace fpdt::pipeline

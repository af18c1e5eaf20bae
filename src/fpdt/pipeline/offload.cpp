// The offload store (see offload.h).
#include "fpdt/pipeline/offload.h"

#include "fpdt/base/error.h"

namespace fpdt::pipeline {

OffloadStore::OffloadStore(kernels::DeviceMemory& memory, const OffloadConfig& config, const LayoutShape& shape,
                           bool dry)
    : config_(config) {
  const std::vector<ArraySpec> arrays = store_arrays(shape);
  std::vector<bool> pair_first(arrays.size(), false);  // the first of two arrays another one's slots are in
  for (const ArraySpec& array : arrays)
    if (array.in_slots_of != Array::count) pair_first[static_cast<size_t>(array.in_slots_of)] = true;
  auto placed = [&](const ArraySpec& array, size_t offset, size_t stride) {
    return Placed{offset, static_cast<size_t>(array.slot_bytes(shape)), stride,
                  static_cast<size_t>(array.elements * element_bytes(array.element, shape)), array.layers, array.chunks};
  };
  size_t total = 0;
  arrays_.resize(arrays.size());
  for (size_t a = 0; a < arrays.size(); ++a) {
    const ArraySpec& array = arrays[a];
    if (array.in_slots_of != Array::count || (a > 0 && pair_first[a - 1])) continue;  // placed with their pair
    const size_t slot = static_cast<size_t>(array.slot_bytes(shape));
    const size_t stride = pair_first[a] ? slot + static_cast<size_t>(arrays[a + 1].slot_bytes(shape)) : slot;
    arrays_[a] = placed(array, total, stride);
    if (pair_first[a]) arrays_[a + 1] = placed(arrays[a + 1], total + slot, stride);
    total += stride * static_cast<size_t>(array.layers * array.chunks);
  }
  for (size_t a = 0; a < arrays.size(); ++a)
    if (arrays[a].in_slots_of != Array::count) {
      const Placed& pair = arrays_[static_cast<size_t>(arrays[a].in_slots_of)];
      arrays_[a] = placed(arrays[a], pair.offset, pair.stride);
    }
  FPDT_ASSERT(total == store_bytes(shape));
  storage_ = memory.allocate_offload(config, total, dry,
                                     "offloaded chunks (" + format_bytes(static_cast<double>(total)) + ")");
}

size_t OffloadStore::offset(Array array, int layer, int chunk) const {
  const Placed& placed = arrays_[static_cast<size_t>(array)];
  FPDT_ASSERT(placed.layers > 0 && layer >= 0 && chunk >= 0 && chunk < placed.chunks);
  const int64_t layer_index = layer % placed.layers;  // arrays that keep fewer layers reuse their slots
  return placed.offset + placed.stride * static_cast<size_t>(layer_index * placed.chunks + chunk);
}

OffloadTraffic schedule_traffic(const Schedule& schedule, const OffloadStore& store) {
  return schedule_traffic(count_copies(schedule), store);
}

OffloadTraffic schedule_traffic(const ScheduleCopies& copies, const OffloadStore& store) {
  OffloadTraffic traffic;
  if (store.resident()) return traffic;
  for (int a = 0; a < kArrayCount; ++a) {
    const uint64_t slot = store.slot_bytes(static_cast<Array>(a));
    OffloadTraffic array;
    array.overflow = !checked_mul(array.read_bytes, static_cast<uint64_t>(copies.fetches[static_cast<size_t>(a)]), slot) ||
                     !checked_mul(array.written_bytes, static_cast<uint64_t>(copies.writes[static_cast<size_t>(a)]), slot);
    traffic += array;
  }
  return traffic;
}

}  // namespace fpdt::pipeline

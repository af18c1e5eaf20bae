// The offload store (see offload.h).
#include "fpdt/pipeline/offload.h"

#include "fpdt/base/error.h"

namespace fpdt::pipeline {

OffloadStore::OffloadStore(kernels::DeviceMemory& memory, const OffloadConfig& config, const LayoutShape& shape,
                           bool dry)
    : config_(config), chunks_(shape.u) {
  size_t total = 0;
  for (const ArraySpec& array : store_arrays(shape)) {
    const size_t slot = static_cast<size_t>(array.slot_bytes(shape));
    arrays_.push_back(Placed{total, slot,
                             static_cast<size_t>(array.elements * element_bytes(array.element, shape)),
                             array.layers});
    total += slot * static_cast<size_t>(array.layers * shape.u);
  }
  storage_ = memory.allocate_offload(config, total, dry,
                                     "offloaded chunks (" + format_bytes(static_cast<double>(total)) + ")");
}

size_t OffloadStore::offset(Array array, int layer, int chunk) const {
  const Placed& placed = arrays_[static_cast<size_t>(array)];
  FPDT_ASSERT(placed.layers > 0 && layer >= 0 && chunk >= 0 && chunk < chunks_);
  const int64_t layer_index = layer % placed.layers;  // arrays that keep fewer layers reuse their slots
  return placed.offset + placed.slot_bytes * static_cast<size_t>(layer_index * chunks_ + chunk);
}

OffloadTraffic schedule_traffic(const Schedule& schedule, const OffloadStore& store) {
  OffloadTraffic traffic;
  if (store.resident()) return traffic;
  for (const Schedule::Call& call : schedule.calls)
    for (const Step& step : schedule.programs[static_cast<size_t>(call.program)].steps) {
      if (step.op == Op::fetch) traffic.read_bytes += store.slot_bytes(step.array);
      if (step.op == Op::write) traffic.written_bytes += store.slot_bytes(step.array);
    }
  return traffic;
}

}  // namespace fpdt::pipeline

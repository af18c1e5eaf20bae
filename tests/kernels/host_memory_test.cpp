// The host implementation of the backend's memory (kernels/device_memory.h, host_memory.cpp): compute-
// tier buffers counted in their tier, the compute-tier operations, and offload storage of each kind
// moved through a copy queue — in order, so a read queued after a write sees what was written. On the
// host the handles are host addresses, so this test (and only it) looks at the bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "fpdt/kernels/device_memory.h"
#include "fpdt/tensor/memory.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

TEST(HostMemory, BuffersAreCountedInTheComputeTier) {
  DeviceMemory& memory = host_memory();
  const size_t before = MemoryTiers::instance().usage(Tier::compute).active_bytes;
  {
    const auto buffer = memory.allocate(5000, "test buffer", "");
    EXPECT_EQ(buffer->bytes(), 8192u);  // whole transfer blocks
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % kTransferAlignBytes, 0u);
    EXPECT_EQ(MemoryTiers::instance().usage(Tier::compute).active_bytes - before, 8192u);
  }
  EXPECT_EQ(MemoryTiers::instance().usage(Tier::compute).active_bytes, before);
}

TEST(HostMemory, ComputeTierOperations) {
  DeviceMemory& memory = host_memory();
  const auto buffer = memory.allocate(4 * 64, "test buffer", "");
  float* data = static_cast<float*>(buffer->data());
  std::vector<float> host(64);
  std::iota(host.begin(), host.end(), 1.0f);
  memory.upload(data, host.data(), 64 * sizeof(float));
  EXPECT_EQ(0, std::memcmp(data, host.data(), 64 * sizeof(float)));
  // copy_2d: 4 rows of 3 floats, from rows 8 floats apart into rows 5 apart.
  const auto target = memory.allocate(4 * 64, "test target", "");
  float* out = static_cast<float*>(target->data());
  memory.fill_zero(out, 64 * sizeof(float));
  memory.copy_2d(out, 5 * sizeof(float), data + 2, 8 * sizeof(float), 3 * sizeof(float), 4);
  for (int row = 0; row < 4; ++row)
    for (int col = 0; col < 5; ++col) EXPECT_EQ(out[row * 5 + col], col < 3 ? host[row * 8 + 2 + col] : 0.0f);
  memory.copy(out, data, 64 * sizeof(float));
  EXPECT_EQ(0, std::memcmp(out, host.data(), 64 * sizeof(float)));
}

TEST(HostMemory, OffloadStorageOfEachKindThroughTheCopyQueue) {
  DeviceMemory& memory = host_memory();
  const testing::TempDir dir;
  for (const OffloadConfig& config : {OffloadConfig{OffloadKind::none, ""}, OffloadConfig{OffloadKind::ram, ""},
                                      OffloadConfig{OffloadKind::disk, dir.path()}}) {
    SCOPED_TRACE(static_cast<int>(config.kind));
    const Tier tier = config.kind == OffloadKind::none ? Tier::compute : Tier::offload;
    const size_t before = MemoryTiers::instance().usage(tier).active_bytes;
    const auto storage = memory.allocate_offload(config, 3 * kTransferAlignBytes, false, "test storage");
    EXPECT_EQ(MemoryTiers::instance().usage(tier).active_bytes - before, 3 * kTransferAlignBytes);
    EXPECT_EQ(storage->resident(0) != nullptr, config.kind == OffloadKind::none);

    const auto source = memory.allocate(kTransferAlignBytes, "source", "");
    const auto target = memory.allocate(kTransferAlignBytes, "target", "");
    std::vector<float> values(1000);
    std::iota(values.begin(), values.end(), 0.5f);
    memory.upload(source->data(), values.data(), values.size() * sizeof(float));
    const auto queue = memory.make_copy_queue();
    // Slot 2 written, then (FIFO) read back: waiting for the read alone is enough.
    const CopyEvent written = queue->write(*storage, 2 * kTransferAlignBytes, source->data(), 4000);
    const CopyEvent read = queue->read(target->data(), *storage, 2 * kTransferAlignBytes, 4000);
    EXPECT_LT(written, read);
    queue->wait(read);
    EXPECT_EQ(0, std::memcmp(target->data(), values.data(), 4000));
    queue->wait_all();
  }
}

TEST(HostMemory, ADryStorageIsOnlyCounted) {
  const size_t before = MemoryTiers::instance().usage(Tier::offload).active_bytes;
  {
    const auto storage = host_memory().allocate_offload(OffloadConfig{OffloadKind::disk, "/nonexistent"},
                                                        size_t{1} << 40, true, "a terabyte, counted");
    EXPECT_EQ(MemoryTiers::instance().usage(Tier::offload).active_bytes - before, size_t{1} << 40);
  }
  EXPECT_EQ(MemoryTiers::instance().usage(Tier::offload).active_bytes, before);
}

}  // namespace
}  // namespace fpdt::kernels

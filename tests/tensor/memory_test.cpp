// Memory tiers: accounting of active/peak bytes, the over-limit error, Buffer ownership and Arena reuse.
#include <gtest/gtest.h>

#include "fpdt/base/error.h"
#include "fpdt/tensor/memory.h"

namespace fpdt {
namespace {

// Restores the compute tier's limit however a test ends.
struct LimitGuard {
  explicit LimitGuard(size_t limit) { MemoryTiers::instance().set_limit(Tier::compute, limit); }
  ~LimitGuard() { MemoryTiers::instance().set_limit(Tier::compute, SIZE_MAX); }
};

TEST(MemoryTiers, CountsActiveAndPeakBytes) {
  auto& tiers = MemoryTiers::instance();
  const size_t before = tiers.usage(Tier::compute).active_bytes;
  tiers.reset_peak(Tier::compute);
  {
    Buffer a(Tier::compute, 1000, "a");  // rounded up to 1024 (64-byte alignment)
    Buffer b(Tier::compute, 64, "b");
    EXPECT_EQ(tiers.usage(Tier::compute).active_bytes, before + 1024 + 64);
  }
  EXPECT_EQ(tiers.usage(Tier::compute).active_bytes, before);
  EXPECT_EQ(tiers.usage(Tier::compute).peak_bytes, before + 1024 + 64);
  Buffer c(Tier::offload, 128, "c");
  EXPECT_GE(tiers.usage(Tier::offload).active_bytes, 128u);
}

TEST(MemoryTiers, OverLimitErrorNamesTierRequestLiveAndLimit) {
  const size_t live = MemoryTiers::instance().usage(Tier::compute).active_bytes;
  LimitGuard guard(live + (1u << 20));
  Buffer held(Tier::compute, 512u << 10, "held");
  try {
    Buffer too_big(Tier::compute, 1u << 20, "attention scores", "lower --chunk-tokens");
    FAIL() << "allocation past the limit did not throw";
  } catch (const Error& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("compute tier"), std::string::npos) << text;
    EXPECT_NE(text.find("1.00 MiB for attention scores"), std::string::npos) << text;
    EXPECT_NE(text.find("live of a"), std::string::npos) << text;
    EXPECT_NE(text.find("hint: lower --chunk-tokens"), std::string::npos) << text;
  }
  // The failed request left the accounting untouched.
  EXPECT_EQ(MemoryTiers::instance().usage(Tier::compute).active_bytes, live + (512u << 10));
}

TEST(Buffer, MoveTransfersOwnership) {
  const size_t before = MemoryTiers::instance().usage(Tier::compute).active_bytes;
  Buffer a(Tier::compute, 256, "a");
  void* data = a.data();
  Buffer b(std::move(a));
  EXPECT_EQ(b.data(), data);
  EXPECT_TRUE(a.empty());
  b = Buffer();
  EXPECT_EQ(MemoryTiers::instance().usage(Tier::compute).active_bytes, before);
}

TEST(Arena, HandsOutAlignedSlicesAndReusesThem) {
  Arena arena(Tier::compute, 1024, "test arena");
  float* first = arena.take<float>(3);
  float* second = arena.take<float>(10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(second) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<char*>(second) - reinterpret_cast<char*>(first), 64);
  EXPECT_THROW(arena.take(2048), Error);
  arena.reset();
  EXPECT_EQ(arena.take<float>(1), first);
}

}  // namespace
}  // namespace fpdt

// Tier accounting, Buffer and Arena (see memory.h).
#include "fpdt/tensor/memory.h"

#include <cstdlib>
#include <mutex>

#include "fpdt/base/error.h"

namespace fpdt {

namespace {
std::mutex g_tiers_mutex;
}

const char* tier_name(Tier tier) { return tier == Tier::compute ? "compute" : "offload"; }

MemoryTiers& MemoryTiers::instance() {
  static MemoryTiers tiers;
  return tiers;
}

void MemoryTiers::set_limit(Tier tier, size_t limit_bytes) {
  std::lock_guard<std::mutex> lock(g_tiers_mutex);
  usage_[static_cast<int>(tier)].limit_bytes = limit_bytes;
}

TierUsage MemoryTiers::usage(Tier tier) const {
  std::lock_guard<std::mutex> lock(g_tiers_mutex);
  return usage_[static_cast<int>(tier)];
}

void MemoryTiers::reset_peak(Tier tier) {
  std::lock_guard<std::mutex> lock(g_tiers_mutex);
  auto& usage = usage_[static_cast<int>(tier)];
  usage.peak_bytes = usage.active_bytes;
}

void MemoryTiers::reserve(Tier tier, size_t bytes, const std::string& what, const std::string& hint) {
  std::lock_guard<std::mutex> lock(g_tiers_mutex);
  auto& usage = usage_[static_cast<int>(tier)];
  if (usage.limit_bytes != SIZE_MAX && usage.active_bytes + bytes > usage.limit_bytes) {
    throw Error("memory",
                std::string(tier_name(tier)) + " tier: cannot allocate " + format_bytes(bytes) +
                    " for " + what + ": " + format_bytes(usage.active_bytes) + " live of a " +
                    format_bytes(usage.limit_bytes) + " limit",
                hint);
  }
  usage.active_bytes += bytes;
  if (usage.active_bytes > usage.peak_bytes) usage.peak_bytes = usage.active_bytes;
}

void MemoryTiers::release(Tier tier, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_tiers_mutex);
  usage_[static_cast<int>(tier)].active_bytes -= bytes;
}

Buffer::Buffer(Tier tier, size_t bytes, const std::string& what, const std::string& hint) : tier_(tier) {
  if (bytes == 0) return;
  // Page alignment for anything of a page or more, so it can take part in O_DIRECT transfers.
  const size_t alignment = bytes >= kPageBytes ? kPageBytes : 64;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  MemoryTiers::instance().reserve(tier, rounded, what, hint);
  data_ = std::aligned_alloc(alignment, rounded);
  if (data_ == nullptr) {
    MemoryTiers::instance().release(tier, rounded);
    throw Error("memory", "the operating system refused " + format_bytes(rounded) + " for " + what,
                "the machine is out of memory; lower the sequence length or the tier limits");
  }
  bytes_ = rounded;
}

Buffer::~Buffer() { reset(); }

Buffer::Buffer(Buffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_), tier_(other.tier_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    bytes_ = other.bytes_;
    tier_ = other.tier_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (data_ == nullptr) return;
  std::free(data_);
  MemoryTiers::instance().release(tier_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

CountedBytes::CountedBytes(Tier tier, size_t bytes, const std::string& what, const std::string& hint)
    : tier_(tier) {
  MemoryTiers::instance().reserve(tier, bytes, what, hint);
  bytes_ = bytes;
}

CountedBytes::~CountedBytes() {
  if (bytes_ > 0) MemoryTiers::instance().release(tier_, bytes_);
}

CountedBytes::CountedBytes(CountedBytes&& other) noexcept : bytes_(other.bytes_), tier_(other.tier_) {
  other.bytes_ = 0;
}

CountedBytes& CountedBytes::operator=(CountedBytes&& other) noexcept {
  if (this != &other) {
    if (bytes_ > 0) MemoryTiers::instance().release(tier_, bytes_);
    bytes_ = other.bytes_;
    tier_ = other.tier_;
    other.bytes_ = 0;
  }
  return *this;
}

Arena::Arena(Tier tier, size_t capacity_bytes, const std::string& what)
    : buffer_(tier, capacity_bytes, what), what_(what) {}

void* Arena::take(size_t bytes) {
  const size_t rounded = align_up(bytes);
  if (used_bytes_ + rounded > buffer_.bytes())
    throw Error("memory", "arena '" + what_ + "' is too small: " + format_bytes(used_bytes_) +
                              " used, " + format_bytes(rounded) + " requested, capacity " +
                              format_bytes(buffer_.bytes()));
  void* slice = static_cast<char*>(buffer_.data()) + used_bytes_;
  used_bytes_ += rounded;
  return slice;
}

}  // namespace fpdt

// Memory tiers and their accounting. Every byte the engine allocates belongs to a tier:
//   Tier::compute — where kernels read and write (RAM under a hard budget on CPU, GPU memory on CUDA);
//   Tier::offload — where chunks rest between uses (host RAM or a disk file).
// Each tier counts active and peak bytes against a limit; a request past the limit throws an
// fpdt::Error naming the tier, the request, the live bytes and the limit. Buffers are RAII owners;
// Arenas carve many short-lived tensors out of one Buffer so hot loops never allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fpdt {

enum class Tier : uint8_t { compute = 0, offload = 1 };
constexpr int kTierCount = 2;
const char* tier_name(Tier tier);

// Bytes counted against one tier. Not thread-safe by itself; MemoryTiers serialises access.
struct TierUsage {
  size_t active_bytes = 0;
  size_t peak_bytes = 0;
  size_t limit_bytes = SIZE_MAX;  // SIZE_MAX = unlimited
};

// Process-wide accounting of the tiers. Limits come from --compute-mem / --offload-mem.
class MemoryTiers {
 public:
  static MemoryTiers& instance();

  void set_limit(Tier tier, size_t limit_bytes);
  TierUsage usage(Tier tier) const;
  // Restart the peak at the current active bytes (e.g. at the start of a step).
  void reset_peak(Tier tier);

  // Count `bytes` for `what`; throws fpdt::Error (with the hint) when the limit would be exceeded.
  void reserve(Tier tier, size_t bytes, const std::string& what, const std::string& hint);
  void release(Tier tier, size_t bytes);

 private:
  MemoryTiers() = default;
  TierUsage usage_[kTierCount];
};

constexpr size_t kPageBytes = 4096;

// Owning, tier-accounted bytes: 64-byte aligned, page-aligned (and a whole number of pages) from a
// page up. Contents are uninitialised.
class Buffer {
 public:
  Buffer() = default;
  // `what` names the buffer in the out-of-budget error; `hint` says what the user may change.
  Buffer(Tier tier, size_t bytes, const std::string& what,
         const std::string& hint = "lower --chunk-tokens or raise --compute-mem");
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Tier tier() const { return tier_; }
  bool empty() const { return data_ == nullptr; }
  template <typename T> T* as() const { return static_cast<T*>(data_); }

 private:
  void reset() noexcept;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Tier tier_ = Tier::compute;
};

// Bytes counted in a tier with no memory behind them: what --dry-run lays out but never allocates
// (it counts against the tier's limit, and its peak, like a Buffer of the same size).
class CountedBytes {
 public:
  CountedBytes() = default;
  CountedBytes(Tier tier, size_t bytes, const std::string& what, const std::string& hint);
  ~CountedBytes();
  CountedBytes(CountedBytes&& other) noexcept;
  CountedBytes& operator=(CountedBytes&& other) noexcept;
  CountedBytes(const CountedBytes&) = delete;
  CountedBytes& operator=(const CountedBytes&) = delete;
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
  Tier tier_ = Tier::compute;
};

// Bump allocator over one Buffer: take() hands out aligned slices, reset() frees all at once.
// Its capacity is fixed at construction, so the tier sees one allocation.
class Arena {
 public:
  Arena() = default;
  Arena(Tier tier, size_t capacity_bytes, const std::string& what);

  // Throws fpdt::Error (naming the arena) when the arena is too small: a sizing bug.
  void* take(size_t bytes);
  template <typename T> T* take(size_t count) { return static_cast<T*>(take(count * sizeof(T))); }
  void reset() { used_bytes_ = 0; }

  size_t used_bytes() const { return used_bytes_; }
  size_t capacity_bytes() const { return buffer_.bytes(); }

 private:
  Buffer buffer_;
  std::string what_;
  size_t used_bytes_ = 0;
};

// Round up to the 64-byte alignment every slice keeps.
constexpr size_t align_up(size_t bytes) { return (bytes + 63) & ~size_t{63}; }

}  // namespace fpdt

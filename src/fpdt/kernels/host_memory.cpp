// The host implementation of DeviceMemory (see device_memory.h), shared by the cpu and reference
// backends: compute-tier buffers are RAM counted under --compute-mem; offload storage is RAM (or, for
// kind none, compute-tier RAM) or one disk file, whose bytes the host copy engine (copy_engine.h)
// moves on its thread.
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/kernels/copy_engine.h"
#include "fpdt/kernels/device_memory.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::kernels {

namespace {

constexpr const char* kModule = "offload";

class HostBuffer final : public DeviceBuffer {
 public:
  explicit HostBuffer(Buffer buffer) : DeviceBuffer(buffer.data(), buffer.bytes()), buffer_(std::move(buffer)) {}

 private:
  Buffer buffer_;
};

class HostStorage final : public OffloadStorage, public HostMoves {
 public:
  HostStorage(const OffloadConfig& config, size_t bytes, bool dry, const std::string& what)
      : OffloadStorage(bytes), config_(config) {
    if (bytes == 0) return;
    if (dry) {
      accounted_tier_ = config.kind == OffloadKind::none ? Tier::compute : Tier::offload;
      MemoryTiers::instance().reserve(accounted_tier_, bytes, what, "lower --seq or raise the tier's limit");
      accounted_bytes_ = bytes;
      return;
    }
    switch (config.kind) {
      case OffloadKind::none:
        memory_ = Buffer(Tier::compute, bytes, "resident chunks with --offload none",
                         "offload them: --offload ram or --offload disk:DIR");
        return;
      case OffloadKind::ram:
        memory_ = Buffer(Tier::offload, bytes, what, "raise --offload-mem or use --offload disk:DIR");
        return;
      case OffloadKind::disk: open_file(bytes, what); return;
    }
  }

  ~HostStorage() override {
    if (fd_ >= 0) ::close(fd_);
    if (accounted_bytes_ > 0) MemoryTiers::instance().release(accounted_tier_, accounted_bytes_);
  }

  void* resident(size_t offset) const override {
    if (config_.kind != OffloadKind::none) return nullptr;
    return static_cast<char*>(memory_.data()) + offset;
  }

  // Synchronous moves, run by the copy engine's thread (copy_engine.h).
  void write(size_t offset, const void* src, size_t bytes) override {
    if (fd_ < 0) {
      std::memcpy(static_cast<char*>(memory_.data()) + offset, src, bytes);
      return;
    }
    const char* cursor = static_cast<const char*>(src);
    size_t remaining = transfer_bytes(bytes);
    off_t at = static_cast<off_t>(offset);
    while (remaining > 0) {
      const ssize_t written = ::pwrite(fd_, cursor, remaining, at);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0)
        throw Error(kModule, "cannot write a chunk to the offload file in " + config_.directory + ": " +
                                 std::strerror(errno),
                    errno == ENOSPC ? "the disk is full; free space or choose another directory" : "");
      cursor += written;
      remaining -= static_cast<size_t>(written);
      at += written;
    }
  }

  void read(size_t offset, void* dst, size_t bytes) const override {
    if (fd_ < 0) {
      std::memcpy(dst, static_cast<const char*>(memory_.data()) + offset, bytes);
      return;
    }
    read_fully_at(fd_, dst, transfer_bytes(bytes), offset, "the offload file in " + config_.directory, kModule);
  }

 private:
  void open_file(size_t bytes, const std::string& what) {
    MemoryTiers::instance().reserve(Tier::offload, bytes, what, "raise --offload-mem");
    accounted_tier_ = Tier::offload;
    accounted_bytes_ = bytes;
    std::string path = path_in(config_.directory, "fpdt-offload-XXXXXX");
    fd_ = ::mkstemp(path.data());
    if (fd_ < 0)
      throw Error(kModule, "cannot create an offload file in " + config_.directory + ": " + std::strerror(errno),
                  "create the directory or choose another with --offload disk:DIR");
    ::unlink(path.c_str());  // the file lives as long as the descriptor: nothing left behind
    // O_DIRECT keeps the chunks out of the page cache where the file system supports it.
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags >= 0) ::fcntl(fd_, F_SETFL, flags | O_DIRECT);
    const int status = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
    if (status != 0 && status != EOPNOTSUPP && status != EINVAL)
      throw Error(kModule,
                  "cannot reserve " + format_bytes(static_cast<double>(bytes)) + " in " + config_.directory + ": " +
                      std::strerror(status),
                  status == ENOSPC ? "the disk is full; free space or choose another directory" : "");
    if (status != 0 && ::ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
      throw Error(kModule, "cannot size the offload file in " + config_.directory + ": " + std::strerror(errno));
  }

  OffloadConfig config_;
  Buffer memory_;  // none / ram
  int fd_ = -1;    // disk
  Tier accounted_tier_ = Tier::offload;
  size_t accounted_bytes_ = 0;  // bytes counted without a Buffer (disk, or a dry run)
};

class HostMemory final : public DeviceMemory {
 public:
  std::unique_ptr<DeviceBuffer> allocate(size_t bytes, const std::string& what, const std::string& hint) override {
    return std::make_unique<HostBuffer>(Buffer(Tier::compute, transfer_bytes(bytes), what, hint));
  }
  std::unique_ptr<OffloadStorage> allocate_offload(const OffloadConfig& config, size_t bytes, bool dry,
                                                   const std::string& what) override {
    return std::make_unique<HostStorage>(config, bytes, dry, what);
  }
  std::unique_ptr<CopyQueue> make_copy_queue() override { return make_host_copy_queue(); }

  // The compute thread's fills and copies (the Ulysses re-layout at P = 1, residual copies, zeroed
  // gradients): large ones split across the OpenMP team, which would otherwise idle through them.
  void fill_zero(void* dst, size_t bytes) override {
    for_slices(bytes, [&](size_t begin, size_t size) { std::memset(static_cast<char*>(dst) + begin, 0, size); });
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    for_slices(bytes, [&](size_t begin, size_t size) {
      std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, size);
    });
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows) override {
    for (size_t row = 0; row < rows; ++row)
      copy_bytes(static_cast<char*>(dst) + row * dst_pitch, static_cast<const char*>(src) + row * src_pitch,
                 row_bytes);
  }
  void upload(void* dst, const void* host, size_t bytes) override { copy_bytes(dst, host, bytes); }
  void download(void* host, const void* src, size_t bytes) override { copy_bytes(host, src, bytes); }

 private:
  // memcpy's pointers must not be null even for zero bytes; ours may be then (DeviceMemory's contract).
  static void copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  // body(begin, size) over [0, bytes) in slices of whole cache lines, on the team from kParallelBytes up
  // (not from inside a parallel region); zero bytes run nothing.
  template <typename Body>
  static void for_slices(size_t bytes, const Body& body) {
    constexpr size_t kParallelBytes = size_t{1} << 20;
    if (bytes == 0) return;
    if (bytes < kParallelBytes || omp_in_parallel()) return body(0, bytes);
    const int slices = omp_get_max_threads();
    const size_t slice = (bytes / slices + 63) / 64 * 64;
#pragma omp parallel for schedule(static) num_threads(slices)
    for (int s = 0; s < slices; ++s) {
      const size_t begin = std::min(bytes, s * slice), end = std::min(bytes, begin + slice);
      if (end > begin) body(begin, end - begin);
    }
  }
};

}  // namespace

DeviceMemory& host_memory() {
  static HostMemory memory;
  return memory;
}

}  // namespace fpdt::kernels

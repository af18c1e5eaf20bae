// Guarded compute-tier memory (see guarded_memory.h): one memfd per allocation, mapped PROT_NONE for
// the handle and read-write for the backend, filled with poison (0xFF bytes: NaNs) as it is made; a registry
// of the live mappings translates a handle to its readable twin. Compute-tier operations and the copy queue translate, then run host_memory()'s.
#include "fpdt/kernels/guarded/guarded_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>

#include "fpdt/base/error.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::kernels {

namespace {

constexpr const char* kModule = "guarded";
constexpr int kPoisonByte = 0xFF;  // what a new compute-tier buffer holds before anything writes it

// The live mappings by the address of their guarded view.
class Registry {
 public:
  static Registry& instance() {
    static Registry registry;
    return registry;
  }
  void add(const char* guarded, char* readable, size_t bytes) {
    const std::unique_lock lock(mutex_);
    regions_[reinterpret_cast<uintptr_t>(guarded)] = Region{readable, bytes};
  }
  void remove(const char* guarded) {
    const std::unique_lock lock(mutex_);
    regions_.erase(reinterpret_cast<uintptr_t>(guarded));
  }
  const void* readable(const void* handle) const {
    const uintptr_t at = reinterpret_cast<uintptr_t>(handle);
    const std::shared_lock lock(mutex_);
    auto it = regions_.upper_bound(at);
    if (it == regions_.begin()) return handle;
    --it;
    if (at >= it->first + it->second.bytes) return handle;  // host memory (or past every mapping)
    return it->second.readable + (at - it->first);
  }

 private:
  struct Region {
    char* readable;
    size_t bytes;
  };
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, Region> regions_;
};

// `bytes` (whole pages) mapped twice: guarded() PROT_NONE, the twin read-write; registered while alive.
class DoubleMapping {
 public:
  explicit DoubleMapping(size_t bytes) : bytes_(bytes) {
    const int fd = ::memfd_create("fpdt-guarded-compute", MFD_CLOEXEC);
    if (fd < 0) throw Error(kModule, std::string("memfd_create failed: ") + std::strerror(errno), "");
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int error = errno;
      ::close(fd);
      throw Error(kModule, "cannot size a guarded compute-tier buffer of " + std::to_string(bytes) + " bytes: " +
                               std::strerror(error), "lower the compute tier's use or free memory");
    }
    void* guarded = ::mmap(nullptr, bytes, PROT_NONE, MAP_SHARED, fd, 0);
    void* readable = guarded == MAP_FAILED ? MAP_FAILED : ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);  // the mappings keep the pages
    if (readable == MAP_FAILED) {
      if (guarded != MAP_FAILED) ::munmap(guarded, bytes);
      throw Error(kModule, std::string("cannot map a guarded compute-tier buffer: ") + std::strerror(error),
                  "raise the process's mapping limit (vm.max_map_count)");
    }
    guarded_ = static_cast<char*>(guarded);
    readable_ = static_cast<char*>(readable);
    // Poisoned, as device memory is never zeroed: every byte 0xFF — a NaN in each float, −1 in each integer —
    // so a read of memory nothing wrote shows in the results (a memfd's pages would read as zeros, which
    // cudaMalloc never promises).
    std::memset(readable_, kPoisonByte, bytes_);
    Registry::instance().add(guarded_, readable_, bytes_);
  }
  ~DoubleMapping() {
    Registry::instance().remove(guarded_);
    ::munmap(guarded_, bytes_);
    ::munmap(readable_, bytes_);
  }
  DoubleMapping(const DoubleMapping&) = delete;
  DoubleMapping& operator=(const DoubleMapping&) = delete;
  char* guarded() const { return guarded_; }

 private:
  size_t bytes_;
  char* guarded_ = nullptr;
  char* readable_ = nullptr;
};

// A mapping of at least one page, counted in the compute tier.
struct GuardedBytes {
  GuardedBytes(size_t bytes, const std::string& what, const std::string& hint)
      : counted(Tier::compute, transfer_bytes(bytes), what, hint),
        mapping(std::max(kTransferAlignBytes, transfer_bytes(bytes))) {}
  CountedBytes counted;
  DoubleMapping mapping;
};

class GuardedBuffer final : public DeviceBuffer {
 public:
  GuardedBuffer(std::unique_ptr<GuardedBytes> bytes, size_t size)
      : DeviceBuffer(bytes->mapping.guarded(), size), bytes_(std::move(bytes)) {}

 private:
  std::unique_ptr<GuardedBytes> bytes_;
};

// Kind none: the store in the compute tier, its slots handles like any compute-tier buffer's.
class GuardedStorage final : public OffloadStorage {
 public:
  GuardedStorage(size_t bytes, const std::string& what)
      : OffloadStorage(bytes),
        bytes_(bytes == 0 ? nullptr
                          : std::make_unique<GuardedBytes>(bytes, what, "offload them: --offload ram or --offload disk:DIR")) {}
  void* resident(size_t offset) const override { return bytes_ ? bytes_->mapping.guarded() + offset : nullptr; }

 private:
  std::unique_ptr<GuardedBytes> bytes_;
};

// host_memory()'s queue with the compute-tier side of each copy translated.
class GuardedCopyQueue final : public CopyQueue {
 public:
  CopyEvent write(OffloadStorage& storage, size_t offset, const void* src, size_t bytes) override {
    check(storage);
    return inner_->write(storage, offset, guarded_readable(src), bytes);
  }
  CopyEvent read(void* dst, const OffloadStorage& storage, size_t offset, size_t bytes) override {
    check(storage);
    return inner_->read(guarded_readable(dst), storage, offset, bytes);
  }
  void wait(CopyEvent event) override { inner_->wait(event); }
  void wait_all() override { inner_->wait_all(); }

 private:
  static void check(const OffloadStorage& storage) {
    FPDT_CHECK(dynamic_cast<const GuardedStorage*>(&storage) == nullptr, kModule,
               "resident storage (--offload none) is used in place, never copied through a queue", "");
  }
  std::unique_ptr<CopyQueue> inner_ = host_memory().make_copy_queue();
};

class GuardedMemory final : public DeviceMemory {
 public:
  std::unique_ptr<DeviceBuffer> allocate(size_t bytes, const std::string& what, const std::string& hint) override {
    return std::make_unique<GuardedBuffer>(std::make_unique<GuardedBytes>(bytes, what, hint), transfer_bytes(bytes));
  }
  std::unique_ptr<OffloadStorage> allocate_offload(const OffloadConfig& config, size_t bytes, bool dry,
                                                   const std::string& what) override {
    if (config.kind == OffloadKind::none && !dry) return std::make_unique<GuardedStorage>(bytes, what);
    return host_memory().allocate_offload(config, bytes, dry, what);  // host RAM or disk (or only counted)
  }
  std::unique_ptr<CopyQueue> make_copy_queue() override { return std::make_unique<GuardedCopyQueue>(); }

  void fill_zero(void* dst, size_t bytes) override { host_memory().fill_zero(guarded_readable(dst), bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    host_memory().copy(guarded_readable(dst), guarded_readable(src), bytes);
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows) override {
    host_memory().copy_2d(guarded_readable(dst), dst_pitch, guarded_readable(src), src_pitch, row_bytes, rows);
  }
  void upload(void* dst, const void* host, size_t bytes) override {
    host_memory().upload(guarded_readable(dst), host, bytes);
  }
  void download(void* host, const void* src, size_t bytes) override {
    host_memory().download(host, guarded_readable(src), bytes);
  }
  // Nothing to bind on a CPU; recorded, so the tests see which threads would have set the GPU.
  void bind_thread() override {
    const std::lock_guard lock(bound_mutex_);
    bound_.insert(std::this_thread::get_id());
  }
  bool bound(std::thread::id thread) const {
    const std::lock_guard lock(bound_mutex_);
    return bound_.count(thread) > 0;
  }
  size_t bound_count() const {
    const std::lock_guard lock(bound_mutex_);
    return bound_.size();
  }

 private:
  mutable std::mutex bound_mutex_;
  std::set<std::thread::id> bound_;
};

GuardedMemory& the_guarded_memory() {
  static GuardedMemory memory;
  return memory;
}

}  // namespace

const void* guarded_readable(const void* handle) {
  return handle == nullptr ? handle : Registry::instance().readable(handle);
}

DeviceMemory& guarded_memory() { return the_guarded_memory(); }

bool guarded_thread_bound(std::thread::id thread) { return the_guarded_memory().bound(thread); }
size_t guarded_bound_threads() { return the_guarded_memory().bound_count(); }

}  // namespace fpdt::kernels

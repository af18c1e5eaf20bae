// Offload store (none / ram / disk) and the copy engine (see offload.h).
#include "fpdt/pipeline/offload.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"

namespace fpdt::pipeline {

namespace {
constexpr const char* kModule = "offload";
}

OffloadConfig parse_offload(const std::string& text) {
  OffloadConfig config;
  if (text == "none") {
    config.kind = OffloadKind::none;
  } else if (text == "ram") {
    config.kind = OffloadKind::ram;
  } else if (text.starts_with("disk:") && text.size() > 5) {
    config.kind = OffloadKind::disk;
    config.directory = text.substr(5);
  } else {
    throw Error(kModule, "unknown offload tier '" + text + "'", "use --offload none, ram or disk:DIR");
  }
  return config;
}

std::string offload_name(const OffloadConfig& config) {
  switch (config.kind) {
    case OffloadKind::none: return "none";
    case OffloadKind::ram: return "ram";
    case OffloadKind::disk: return "disk:" + config.directory;
  }
  return "?";
}

OffloadStore::OffloadStore(const OffloadConfig& config) : config_(config) {}

OffloadStore::~OffloadStore() {
  if (fd_ >= 0) ::close(fd_);
  if (accounted_bytes_ > 0) MemoryTiers::instance().release(accounted_tier_, accounted_bytes_);
}

int OffloadStore::add_array(const std::string& name, int64_t slots, int64_t floats) {
  FPDT_ASSERT(memory_.empty() && fd_ < 0);
  const size_t slot_bytes = chunk_buffer_bytes(static_cast<size_t>(floats) * sizeof(float));
  arrays_.push_back(Array{name, slots, floats, slot_bytes, total_bytes_});
  total_bytes_ += slot_bytes * static_cast<size_t>(slots);
  return static_cast<int>(arrays_.size()) - 1;
}

void OffloadStore::allocate(bool dry) {
  if (total_bytes_ == 0) return;
  const std::string what = "offloaded chunks (" + format_bytes(static_cast<double>(total_bytes_)) + ")";
  if (dry) {
    const Tier tier = config_.kind == OffloadKind::none ? Tier::compute : Tier::offload;
    MemoryTiers::instance().reserve(tier, total_bytes_, what, "lower --seq or raise the tier's limit");
    accounted_tier_ = tier;
    accounted_bytes_ = total_bytes_;
    return;
  }
  switch (config_.kind) {
    case OffloadKind::none:
      memory_ = Buffer(Tier::compute, total_bytes_, "resident chunks with --offload none",
                       "offload them: --offload ram or --offload disk:DIR");
      return;
    case OffloadKind::ram:
      memory_ = Buffer(Tier::offload, total_bytes_, what, "raise --offload-mem or use --offload disk:DIR");
      return;
    case OffloadKind::disk: break;
  }
  MemoryTiers::instance().reserve(Tier::offload, total_bytes_, what, "raise --offload-mem");
  accounted_tier_ = Tier::offload;
  accounted_bytes_ = total_bytes_;
  file_path_ = config_.directory + "/fpdt-offload-XXXXXX";
  fd_ = ::mkstemp(file_path_.data());
  if (fd_ < 0)
    throw Error(kModule, "cannot create an offload file in " + config_.directory + ": " + std::strerror(errno),
                "create the directory or choose another with --offload disk:DIR");
  ::unlink(file_path_.c_str());  // the file lives as long as the descriptor: nothing left behind
  // O_DIRECT keeps the chunks out of the page cache where the file system supports it.
  const int flags = ::fcntl(fd_, F_GETFL);
  direct_io_ = flags >= 0 && ::fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0;
  const int status = ::posix_fallocate(fd_, 0, static_cast<off_t>(total_bytes_));
  if (status != 0 && status != EOPNOTSUPP && status != EINVAL)
    throw Error(kModule,
                "cannot reserve " + format_bytes(static_cast<double>(total_bytes_)) + " in " + config_.directory +
                    ": " + std::strerror(status),
                status == ENOSPC ? "the disk is full; free space or choose another directory" : "");
  if (status != 0 && ::ftruncate(fd_, static_cast<off_t>(total_bytes_)) != 0)
    throw Error(kModule, "cannot size the offload file in " + config_.directory + ": " + std::strerror(errno));
}

float* OffloadStore::resident(int array, int64_t slot) const {
  if (config_.kind != OffloadKind::none) return nullptr;
  const Array& a = arrays_[array];
  return reinterpret_cast<float*>(static_cast<char*>(memory_.data()) + a.offset_bytes + a.slot_bytes * slot);
}

void OffloadStore::write(int array, int64_t slot, const float* src) {
  const Array& a = arrays_[array];
  FPDT_ASSERT(slot >= 0 && slot < a.slots);
  const size_t offset = a.offset_bytes + a.slot_bytes * static_cast<size_t>(slot);
  if (fd_ < 0) {
    std::memcpy(static_cast<char*>(memory_.data()) + offset, src, static_cast<size_t>(a.floats) * sizeof(float));
    return;
  }
  const char* cursor = reinterpret_cast<const char*>(src);
  size_t remaining = a.slot_bytes;
  off_t at = static_cast<off_t>(offset);
  while (remaining > 0) {
    const ssize_t written = ::pwrite(fd_, cursor, remaining, at);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0)
      throw Error(kModule, "cannot write chunk '" + a.name + "' to the offload file in " + config_.directory + ": " +
                               std::strerror(errno),
                  errno == ENOSPC ? "the disk is full; free space or use a larger --chunk-tokens directory" : "");
    cursor += written;
    remaining -= static_cast<size_t>(written);
    at += written;
  }
}

void OffloadStore::read(int array, int64_t slot, float* dst) const {
  const Array& a = arrays_[array];
  FPDT_ASSERT(slot >= 0 && slot < a.slots);
  const size_t offset = a.offset_bytes + a.slot_bytes * static_cast<size_t>(slot);
  if (fd_ < 0) {
    std::memcpy(dst, static_cast<const char*>(memory_.data()) + offset, static_cast<size_t>(a.floats) * sizeof(float));
    return;
  }
  read_fully_at(fd_, dst, a.slot_bytes, offset, "the offload file in " + config_.directory, kModule);
}

CopyEngine::CopyEngine() : worker_([this] { run(); }) {}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  worker_.join();
}

CopyEngine::Event CopyEngine::submit(std::function<void()> copy) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(std::move(copy));
  work_ready_.notify_one();
  return ++submitted_;
}

void CopyEngine::wait(Event event) {
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [&] { return completed_ >= event || error_ != nullptr; });
  if (error_ != nullptr) std::rethrow_exception(error_);
}

void CopyEngine::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping with nothing left
    std::function<void()> copy = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr failure;
    try {
      copy();
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure != nullptr && error_ == nullptr) error_ = failure;
    ++completed_;
    work_done_.notify_all();
  }
}

}  // namespace fpdt::pipeline

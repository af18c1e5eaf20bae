// The CUDA backend's memory (see cuda_memory.h). Each buffer is counted in its tier like the host's;
// a copy queue records an event on the compute stream before each copy (so the copy starts after the
// compute submitted before it) and one after it, which wait() makes the compute stream wait on (and
// through which it reports a copy that failed). The pinned offload store is allocated in pieces of
// kPinnedPieceBytes (one cudaMallocHost of 100+ GB pins for minutes or fails outright); a copy that
// crosses a piece's end is two copies. Uploads (pinned source or pageable) go through pinned staging slots,
// so the host never waits inside the chunk loop for the device to reach an upload. Zero-byte
// operations touch nothing (their pointers may be null).
// --offload disk is refused for now: it needs a pinned bounce buffer and a file thread.
#include <algorithm>
#include <cstring>
#include <vector>

#include "fpdt/base/cuda_check.h"
#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/cuda_memory.h"
#include "fpdt/kernels/cuda/pieces.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::kernels::cuda {

namespace {

constexpr size_t kPinnedPieceBytes = size_t(1) << 30;  // one cudaMallocHost of the offload store
constexpr size_t kStagingSlotBytes = size_t(256) << 10;  // one pinned staging slot of upload()
constexpr size_t kStagingSlots = 64;                     // ~10 chunks' uploads in flight before a slot is reused

// Device bytes counted in `tier`; null data when only counted (a dry run) or empty.
class Allocation {
 public:
  Allocation(Tier tier, size_t bytes, bool dry, const std::string& what, const std::string& hint)
      : tier_(tier), bytes_(bytes) {
    MemoryTiers::instance().reserve(tier, bytes, what, hint);
    if (dry || bytes == 0) return;
    const cudaError_t status = cudaMalloc(&data_, bytes);
    if (status != cudaSuccess) {
      MemoryTiers::instance().release(tier, bytes);
      throw_cuda_error(status, "cudaMalloc", __FILE__, __LINE__);
    }
  }
  ~Allocation() {
    if (data_ != nullptr) cudaFree(data_);
    MemoryTiers::instance().release(tier_, bytes_);
  }
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  void* data() const { return data_; }

 private:
  Tier tier_;
  size_t bytes_;
  void* data_ = nullptr;
};

// Pinned host bytes counted in Tier::offload, in pieces of kPinnedPieceBytes (the last shorter); none
// allocated in a dry run.
class PinnedPieces {
 public:
  PinnedPieces(size_t bytes, bool dry, const std::string& what) : bytes_(bytes) {
    MemoryTiers::instance().reserve(Tier::offload, bytes, what, "raise --offload-mem");
    if (dry) return;
    pieces_.reserve(pieces_for(bytes, kPinnedPieceBytes));
    for (size_t begin = 0; begin < bytes; begin += kPinnedPieceBytes) {
      void* piece = nullptr;
      const cudaError_t status = cudaMallocHost(&piece, std::min(kPinnedPieceBytes, bytes - begin));
      if (status != cudaSuccess) {
        release();
        throw Error("offload",
                    "cannot pin " + format_bytes(static_cast<double>(bytes)) + " of host memory for " + what +
                        " (failed after " + format_bytes(static_cast<double>(begin)) + "): " +
                        cudaGetErrorString(status),
                    "lower --offload-mem or --seq, or free host memory");
      }
      pieces_.push_back(piece);
    }
  }
  ~PinnedPieces() { release(); }
  PinnedPieces(const PinnedPieces&) = delete;
  PinnedPieces& operator=(const PinnedPieces&) = delete;
  char* piece(size_t index) const { return static_cast<char*>(pieces_[index]); }

 private:
  void release() {
    for (void* piece : pieces_) cudaFreeHost(piece);
    pieces_.clear();
    MemoryTiers::instance().release(Tier::offload, bytes_);
    bytes_ = 0;
  }

  size_t bytes_;
  std::vector<void*> pieces_;
};

class CudaBuffer final : public DeviceBuffer {
 public:
  explicit CudaBuffer(std::unique_ptr<Allocation> allocation, size_t bytes)
      : DeviceBuffer(allocation->data(), bytes), allocation_(std::move(allocation)) {}

 private:
  std::unique_ptr<Allocation> allocation_;
};

class CudaStorage final : public OffloadStorage {
 public:
  CudaStorage(const OffloadConfig& config, size_t bytes, bool dry, const std::string& what)
      : OffloadStorage(bytes) {
    if (config.kind == OffloadKind::disk)
      throw Error("offload", "--offload disk is not available with the cuda backend yet",
                  "use --offload ram (pinned host memory) or none");
    if (config.kind == OffloadKind::none)
      resident_ = std::make_unique<Allocation>(Tier::compute, bytes, dry, "resident chunks with --offload none",
                                               "offload them: --offload ram");
    else
      pinned_ = std::make_unique<PinnedPieces>(bytes, dry, what);
  }
  void* resident(size_t offset) const override {
    return resident_ ? static_cast<char*>(resident_->data()) + offset : nullptr;
  }
  const PinnedPieces& pinned() const { return *pinned_; }

 private:
  std::unique_ptr<Allocation> resident_;  // kind none
  std::unique_ptr<PinnedPieces> pinned_;  // kind ram
};

class CudaCopyQueue final : public CopyQueue {
 public:
  explicit CudaCopyQueue(cudaStream_t compute) : compute_(compute) {
    FPDT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    FPDT_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
    for (cudaEvent_t& event : done_) FPDT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  ~CudaCopyQueue() override {
    cudaStreamSynchronize(copy_);
    for (cudaEvent_t event : done_) cudaEventDestroy(event);
    cudaEventDestroy(compute_done_);
    cudaStreamDestroy(copy_);
  }

  CopyEvent write(OffloadStorage& storage, size_t offset, const void* src, size_t bytes) override {
    const PinnedPieces& pinned = static_cast<CudaStorage&>(storage).pinned();
    return submit(offset, bytes, [&](size_t piece, size_t in_piece, size_t done, size_t length) {
      FPDT_CUDA_CHECK(cudaMemcpyAsync(pinned.piece(piece) + in_piece, static_cast<const char*>(src) + done, length,
                                      cudaMemcpyDeviceToHost, copy_));
    });
  }
  CopyEvent read(void* dst, const OffloadStorage& storage, size_t offset, size_t bytes) override {
    const PinnedPieces& pinned = static_cast<const CudaStorage&>(storage).pinned();
    return submit(offset, bytes, [&](size_t piece, size_t in_piece, size_t done, size_t length) {
      FPDT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, pinned.piece(piece) + in_piece, length,
                                      cudaMemcpyHostToDevice, copy_));
    });
  }
  // The compute stream waits (the host does not). An event's slot is reused kEvents copies later; a
  // wait on an older copy then waits for a later one, which FIFO order makes harmless. A copy that has
  // failed by now (a bad address, a lost device) is thrown here, as the host queue throws a failed write.
  void wait(CopyEvent event) override {
    if (event == 0) return;
    const cudaEvent_t done = done_[event % kEvents];
    FPDT_CUDA_CHECK(cudaStreamWaitEvent(compute_, done, 0));
    const cudaError_t status = cudaEventQuery(done);
    if (status != cudaSuccess && status != cudaErrorNotReady)
      throw_cuda_error(status, "an offload copy (cudaMemcpyAsync on the copy stream)", __FILE__, __LINE__);
  }
  void wait_all() override {
    FPDT_CUDA_CHECK(cudaStreamSynchronize(copy_));
    FPDT_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

 private:
  static constexpr size_t kEvents = 64;

  // The copies of [offset, offset + bytes) of the store, one per pinned piece it touches, after the
  // compute submitted so far. Zero bytes submit nothing: the event is the last copy's (waiting on it
  // keeps the FIFO promise for every copy before it).
  template <typename CopyPart>
  CopyEvent submit(size_t offset, size_t bytes, CopyPart&& copy_part) {
    if (bytes == 0) return submitted_;
    FPDT_CUDA_CHECK(cudaEventRecord(compute_done_, compute_));
    FPDT_CUDA_CHECK(cudaStreamWaitEvent(copy_, compute_done_, 0));
    for_each_piece(offset, bytes, kPinnedPieceBytes, copy_part);
    const CopyEvent event = ++submitted_;
    FPDT_CUDA_CHECK(cudaEventRecord(done_[event % kEvents], copy_));
    return event;
  }

  cudaStream_t compute_;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;
  cudaEvent_t done_[kEvents] = {};
  CopyEvent submitted_ = 0;
};

// upload()'s pinned staging: kStagingSlots slots of kStagingSlotBytes, used in turn; a slot is written
// again only after the device has copied it out (its event), which with 64 slots is ~10 chunks later.
class PinnedStaging {
 public:
  PinnedStaging() = default;
  ~PinnedStaging() {
    for (cudaEvent_t event : copied_)
      if (event != nullptr) cudaEventDestroy(event);
    if (arena_ != nullptr) cudaFreeHost(arena_);
  }
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // dst (device) = host bytes, staged; returns once `host` may be reused.
  void upload(void* dst, const void* host, size_t bytes, cudaStream_t stream) {
    if (arena_ == nullptr) {  // the first pageable upload
      FPDT_CUDA_CHECK(cudaMallocHost(&arena_, kStagingSlots * kStagingSlotBytes));
      for (cudaEvent_t& event : copied_) FPDT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
    for_each_piece(0, bytes, kStagingSlotBytes, [&](size_t, size_t, size_t done, size_t length) {
      const size_t slot = next_slot_++ % kStagingSlots;
      char* staged = static_cast<char*>(arena_) + slot * kStagingSlotBytes;
      FPDT_CUDA_CHECK(cudaEventSynchronize(copied_[slot]));  // at once unless the slot is still being copied
      std::memcpy(staged, static_cast<const char*>(host) + done, length);
      FPDT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, staged, length, cudaMemcpyHostToDevice, stream));
      FPDT_CUDA_CHECK(cudaEventRecord(copied_[slot], stream));
    });
  }

 private:
  void* arena_ = nullptr;  // (kStagingSlots, kStagingSlotBytes), pinned
  cudaEvent_t copied_[kStagingSlots] = {};
  size_t next_slot_ = 0;
};

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(cudaStream_t compute) : compute_(compute) { FPDT_CUDA_CHECK(cudaGetDevice(&device_)); }

  void bind_thread() override { FPDT_CUDA_CHECK(cudaSetDevice(device_)); }

  std::unique_ptr<DeviceBuffer> allocate(size_t bytes, const std::string& what, const std::string& hint) override {
    const size_t rounded = transfer_bytes(bytes);
    return std::make_unique<CudaBuffer>(std::make_unique<Allocation>(Tier::compute, rounded, false, what, hint),
                                        rounded);
  }
  std::unique_ptr<OffloadStorage> allocate_offload(const OffloadConfig& config, size_t bytes, bool dry,
                                                   const std::string& what) override {
    return std::make_unique<CudaStorage>(config, bytes, dry, what);
  }
  std::unique_ptr<CopyQueue> make_copy_queue() override { return std::make_unique<CudaCopyQueue>(compute_); }

  void fill_zero(void* dst, size_t bytes) override {
    if (bytes > 0) FPDT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute_));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) FPDT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_));
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows) override {
    if (row_bytes == 0 || rows == 0) return;
    FPDT_CUDA_CHECK(
        cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice, compute_));
  }
  // Every upload goes through the staging slots, pinned source or not: the caller may reuse `host` when
  // this returns (device_memory.h), and a cudaMemcpyAsync straight from pinned memory returns before the
  // device has read it — the copy runs when the stream reaches it, reading whatever the host wrote since.
  // (A plain cudaMemcpyAsync from pageable memory would instead hold the host until the device reached it.)
  void upload(void* dst, const void* host, size_t bytes) override {
    if (bytes == 0) return;
    staging_.upload(dst, host, bytes, compute_);
  }
  void download(void* host, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    FPDT_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, compute_));
    FPDT_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

 private:
  cudaStream_t compute_;
  int device_ = 0;  // the backend's GPU (set before this memory is made)
  PinnedStaging staging_;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_device_memory(cudaStream_t compute) { return std::make_unique<CudaMemory>(compute); }

}  // namespace fpdt::kernels::cuda

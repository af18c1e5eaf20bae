// The CUDA backend's memory (see cuda_memory.h). Each buffer is counted in its tier like the host's;
// a copy queue records an event on the compute stream before each copy (so the copy starts after the
// compute submitted before it) and one after it, which wait() makes the compute stream wait on.
// --offload disk is refused for now: it needs a pinned bounce buffer and a file thread.
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/cuda_check.h"
#include "fpdt/kernels/cuda/cuda_memory.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::kernels::cuda {

namespace {

// Device or pinned host bytes counted in `tier`; null data when only counted (a dry run).
class Allocation {
 public:
  Allocation(Tier tier, bool pinned_host, size_t bytes, bool dry, const std::string& what, const std::string& hint)
      : tier_(tier), pinned_host_(pinned_host), bytes_(bytes) {
    MemoryTiers::instance().reserve(tier, bytes, what, hint);
    if (dry || bytes == 0) return;
    const cudaError_t status = pinned_host ? cudaMallocHost(&data_, bytes) : cudaMalloc(&data_, bytes);
    if (status != cudaSuccess) {
      MemoryTiers::instance().release(tier, bytes);
      throw_cuda_error(status, pinned_host ? "cudaMallocHost" : "cudaMalloc", __FILE__, __LINE__);
    }
  }
  ~Allocation() {
    if (data_ != nullptr) pinned_host_ ? cudaFreeHost(data_) : cudaFree(data_);
    MemoryTiers::instance().release(tier_, bytes_);
  }
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  void* data() const { return data_; }

 private:
  Tier tier_;
  bool pinned_host_;
  size_t bytes_;
  void* data_ = nullptr;
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
      : OffloadStorage(bytes), resident_(config.kind == OffloadKind::none) {
    if (config.kind == OffloadKind::disk)
      throw Error("offload", "--offload disk is not available with the cuda backend yet",
                  "use --offload ram (pinned host memory) or none");
    allocation_ = resident_ ? std::make_unique<Allocation>(Tier::compute, false, bytes, dry,
                                                           "resident chunks with --offload none",
                                                           "offload them: --offload ram")
                            : std::make_unique<Allocation>(Tier::offload, true, bytes, dry, what,
                                                           "raise --offload-mem");
  }
  void* resident(size_t offset) const override {
    return resident_ ? static_cast<char*>(allocation_->data()) + offset : nullptr;
  }
  char* host(size_t offset) const { return static_cast<char*>(allocation_->data()) + offset; }

 private:
  bool resident_;
  std::unique_ptr<Allocation> allocation_;
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
    return submit(static_cast<CudaStorage&>(storage).host(offset), src, bytes, cudaMemcpyDeviceToHost);
  }
  CopyEvent read(void* dst, const OffloadStorage& storage, size_t offset, size_t bytes) override {
    return submit(dst, static_cast<const CudaStorage&>(storage).host(offset), bytes, cudaMemcpyHostToDevice);
  }
  // The compute stream waits (the host does not). An event's slot is reused kEvents copies later; a
  // wait on an older copy then waits for a later one, which FIFO order makes harmless.
  void wait(CopyEvent event) override {
    if (event == 0) return;
    FPDT_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_[event % kEvents], 0));
  }
  void wait_all() override {
    FPDT_CUDA_CHECK(cudaStreamSynchronize(copy_));
    FPDT_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

 private:
  static constexpr size_t kEvents = 64;

  CopyEvent submit(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    FPDT_CUDA_CHECK(cudaEventRecord(compute_done_, compute_));
    FPDT_CUDA_CHECK(cudaStreamWaitEvent(copy_, compute_done_, 0));
    FPDT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, copy_));
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

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(cudaStream_t compute) : compute_(compute) {}

  std::unique_ptr<DeviceBuffer> allocate(size_t bytes, const std::string& what, const std::string& hint) override {
    const size_t rounded = transfer_bytes(bytes);
    return std::make_unique<CudaBuffer>(std::make_unique<Allocation>(Tier::compute, false, rounded, false, what, hint),
                                        rounded);
  }
  std::unique_ptr<OffloadStorage> allocate_offload(const OffloadConfig& config, size_t bytes, bool dry,
                                                   const std::string& what) override {
    return std::make_unique<CudaStorage>(config, bytes, dry, what);
  }
  std::unique_ptr<CopyQueue> make_copy_queue() override { return std::make_unique<CudaCopyQueue>(compute_); }

  void fill_zero(void* dst, size_t bytes) override { FPDT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, compute_)); }
  void copy(void* dst, const void* src, size_t bytes) override {
    FPDT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_));
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows) override {
    FPDT_CUDA_CHECK(
        cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice, compute_));
  }
  // From pageable memory the call returns once the bytes are staged, so `host` may be reused.
  void upload(void* dst, const void* host, size_t bytes) override {
    FPDT_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, compute_));
  }
  void download(void* host, const void* src, size_t bytes) override {
    FPDT_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, compute_));
    FPDT_CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

 private:
  cudaStream_t compute_;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_device_memory(cudaStream_t compute) { return std::make_unique<CudaMemory>(compute); }

}  // namespace fpdt::kernels::cuda

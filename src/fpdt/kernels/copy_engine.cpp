// The host's copy engine (see copy_engine.h): copies are tasks of one worker thread, in submission
// order (base/work_queue.h), so its events are the queue's and a failed copy fails every later wait.
#include "fpdt/kernels/copy_engine.h"

#include "fpdt/base/error.h"
#include "fpdt/base/trace.h"
#include "fpdt/base/work_queue.h"
#include "fpdt/kernels/device_memory.h"

namespace fpdt::kernels {

namespace {

class HostCopyQueue final : public CopyQueue {
 public:
  CopyEvent write(OffloadStorage& storage, size_t offset, const void* src, size_t bytes) override {
    HostMoves& host = moves(storage);
    return queue_.submit([&host, offset, src, bytes] {
      const trace::Span span("offload chunk", "copy");
      host.write(offset, src, bytes);
    });
  }

  CopyEvent read(void* dst, const OffloadStorage& storage, size_t offset, size_t bytes) override {
    const HostMoves& host = moves(storage);
    return queue_.submit([&host, offset, dst, bytes] {
      const trace::Span span("fetch chunk", "copy");
      host.read(offset, dst, bytes);
    });
  }

  void wait(CopyEvent event) override { queue_.wait(event); }
  void wait_all() override { queue_.wait_all(); }

 private:
  // The storage's moves: it is storage of the host's memory (host_memory.cpp).
  static HostMoves& moves(OffloadStorage& storage) {
    auto* host = dynamic_cast<HostMoves*>(&storage);
    FPDT_ASSERT(host != nullptr);
    return *host;
  }
  static const HostMoves& moves(const OffloadStorage& storage) {
    const auto* host = dynamic_cast<const HostMoves*>(&storage);
    FPDT_ASSERT(host != nullptr);
    return *host;
  }

  WorkQueue queue_;
};

}  // namespace

std::unique_ptr<CopyQueue> make_host_copy_queue() { return std::make_unique<HostCopyQueue>(); }

}  // namespace fpdt::kernels

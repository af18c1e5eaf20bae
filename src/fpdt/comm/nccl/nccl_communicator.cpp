// The NCCL backend (compiled when CMake finds the CUDA toolkit and NCCL; nccl_stub.cpp otherwise): a
// Communicator whose buffers are device memory. Every transfer is queued on the compute stream it was
// given (stream-ordered: nothing here waits for the device, except barrier); the reductions are the
// base class's reduce-scatter + all-gather over exchange_bytes (grouped ncclSend/ncclRecv), summed on
// the stream in rank order (nccl_sum.cu), so they are bitwise those of the host backends — not
// ncclAllReduce, whose order of additions depends on the rank and the ring. The host-side work (the
// unique id's broadcast, barrier, the count check of all_to_all_v, split, abort) goes to the bootstrap
// communicator (MPI under mpirun).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "fpdt/base/cuda_check.h"
#include "fpdt/base/error.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/comm/nccl/nccl_sum.h"
#include "fpdt/comm/text.h"

namespace fpdt::comm {

namespace {

[[noreturn]] void throw_nccl_error(const char* text, const char* statement, const char* file, int line) {
  throw Error("comm", detail::cat("NCCL call failed: ", statement, ": ", text, " (", file, ":", line, ")"),
              "if another rank failed first, its message names it; NCCL_DEBUG=WARN says more");
}

#define FPDT_NCCL_CHECK(call)                                                                         \
  do {                                                                                                \
    const ncclResult_t fpdt_nccl_status_ = (call);                                                    \
    if (fpdt_nccl_status_ != ncclSuccess)                                                             \
      throw_nccl_error(ncclGetErrorString(fpdt_nccl_status_), #call, __FILE__, __LINE__);     \
  } while (0)

class NcclCommunicator final : public Communicator {
 public:
  // owned: the bootstrap when this communicator made it (split); else null and `bootstrap` is the caller's.
  NcclCommunicator(Communicator& bootstrap, std::unique_ptr<Communicator> owned, cudaStream_t stream)
      : owned_bootstrap_(std::move(owned)), bootstrap_(bootstrap), stream_(stream) {
    ncclUniqueId id{};
    if (bootstrap_.rank() == 0) FPDT_NCCL_CHECK(ncclGetUniqueId(&id));
    bootstrap_.broadcast(&id, sizeof id, 0);
    FPDT_NCCL_CHECK(ncclCommInitRank(&comm_, bootstrap_.size(), id, bootstrap_.rank()));
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);  // no throw from a destructor: a failure here has been reported already
    ncclCommDestroy(comm_);
  }

  int rank() const override { return bootstrap_.rank(); }
  int size() const override { return bootstrap_.size(); }
  std::string backend() const override { return "nccl"; }

  void barrier() override {
    FPDT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    bootstrap_.barrier();
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> group = bootstrap_.split(color, key);
    Communicator& group_ref = *group;
    return std::make_unique<NcclCommunicator>(group_ref, std::move(group), stream_);
  }

  [[noreturn]] void abort(const std::string& reason) override {
    ncclCommAbort(comm_);  // unblocks this rank's queued NCCL work; the bootstrap ends the job
    bootstrap_.abort(reason);
    std::abort();  // not reached (the bootstrap's abort does not return), but a virtual call's
                   // [[noreturn]] is not known to the compiler
  }

 protected:
  void exchange_bytes(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                      const size_t* recv_counts, const size_t* recv_displs) override {
    const int me = rank();
    const auto* from = static_cast<const char*>(send);
    auto* to = static_cast<char*>(recv);
    if (send_counts[me] > 0)
      FPDT_CUDA_CHECK(cudaMemcpyAsync(to + recv_displs[me], from + send_displs[me], send_counts[me],
                                           cudaMemcpyDeviceToDevice, stream_));
    FPDT_NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < size(); ++j) {
      if (j == me) continue;
      if (send_counts[j] > 0)
        FPDT_NCCL_CHECK(ncclSend(from + send_displs[j], send_counts[j], ncclChar, j, comm_, stream_));
      if (recv_counts[j] > 0)
        FPDT_NCCL_CHECK(ncclRecv(to + recv_displs[j], recv_counts[j], ncclChar, j, comm_, stream_));
    }
    FPDT_NCCL_CHECK(ncclGroupEnd());
  }

  // A mismatch would leave NCCL waiting for bytes that never come: the counts are compared on the host
  // first (every rank's send counts gathered through the bootstrap).
  void check_exchange_counts(const size_t* send_counts, const size_t* recv_counts) override {
    const size_t ranks = static_cast<size_t>(size()), me = static_cast<size_t>(rank());
    std::vector<size_t> all(ranks * ranks);  // (P sender, P receiver)
    bootstrap_.all_gather(send_counts, all.data(), ranks * sizeof(size_t));
    for (size_t j = 0; j < ranks; ++j)
      if (all[j * ranks + me] != recv_counts[j])
        throw detail::count_mismatch(static_cast<int>(j), rank(), all[j * ranks + me], recv_counts[j], "elements");
  }

  void gather_bytes(const void* send, void* recv, size_t bytes_per_rank) override {
    if (bytes_per_rank == 0) return;
    FPDT_NCCL_CHECK(ncclAllGather(send, recv, bytes_per_rank, ncclChar, comm_, stream_));
  }

  void broadcast_bytes(void* data, size_t bytes, int root) override {
    if (bytes == 0) return;
    FPDT_NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclChar, root, comm_, stream_));
  }

  // Stream-ordered device scratch: freed on the stream after the work queued with it.
  std::shared_ptr<void> scratch(size_t bytes) override {
    void* memory = nullptr;
    FPDT_CUDA_CHECK(cudaMallocAsync(&memory, std::max<size_t>(bytes, 1), stream_));
    const cudaStream_t stream = stream_;
    return std::shared_ptr<void>(memory, [stream](void* pointer) { cudaFreeAsync(pointer, stream); });
  }
  void sum_blocks(float* dst, const float* blocks, size_t ranks, size_t n, bool add) override {
    nccl::sum_blocks_on_stream(dst, blocks, ranks, n, add, stream_);
  }
  void sum_blocks(double* dst, const double* blocks, size_t ranks, size_t n, bool add) override {
    nccl::sum_blocks_on_stream(dst, blocks, ranks, n, add, stream_);
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    FPDT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }

 private:
  std::unique_ptr<Communicator> owned_bootstrap_;
  Communicator& bootstrap_;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl(Communicator& bootstrap, void* cuda_stream) {
  return std::make_unique<NcclCommunicator>(bootstrap, nullptr, static_cast<cudaStream_t>(cuda_stream));
}

}  // namespace fpdt::comm

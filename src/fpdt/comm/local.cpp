// The local communicator: a group of one rank. Every collective is a copy (or nothing); abort
// prints the reason and ends the process with exit code 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/comm/text.h"

namespace fpdt::comm {

namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int key) override {
    FPDT_CHECK(color >= 0, "comm", "split: color must be >= 0", "");
    return std::make_unique<LocalCommunicator>();
  }
  [[noreturn]] void abort(const std::string& reason) override {
    log::error(reason);
    std::fflush(nullptr);
    std::_Exit(1);
  }

 protected:
  void check_exchange_counts(const size_t* send_counts, const size_t* recv_counts) override {
    if (send_counts[0] != recv_counts[0])
      throw detail::count_mismatch(0, 0, send_counts[0], recv_counts[0], "elements");
  }
  void exchange_bytes(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                      const size_t* recv_counts, const size_t* recv_displs) override {
    if (send_counts[0] == 0) return;
    std::memcpy(static_cast<char*>(recv) + recv_displs[0], static_cast<const char*>(send) + send_displs[0],
                send_counts[0]);
  }
  void gather_bytes(const void* send, void* recv, size_t bytes_per_rank) override {
    if (bytes_per_rank > 0 && send != recv) std::memmove(recv, send, bytes_per_rank);
  }
  void broadcast_bytes(void* data, size_t bytes, int root) override {}
};

}  // namespace

std::unique_ptr<Communicator> make_local() { return std::make_unique<LocalCommunicator>(); }

}  // namespace fpdt::comm

// The local communicator: a group of one rank. Every collective is a copy (or nothing); abort
// prints the reason and ends the process with exit code 1. And the dry communicator: one rank of a
// group that is never started (--dry-run), which refuses to communicate.
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

class DryCommunicator final : public Communicator {
 public:
  DryCommunicator(int size, int rank) : size_(size), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "dry run"; }
  void barrier() override { refuse("barrier"); }
  std::unique_ptr<Communicator> split(int, int) override { refuse("split"); }
  [[noreturn]] void abort(const std::string& reason) override {
    log::error(reason);
    std::fflush(nullptr);
    std::_Exit(1);
  }

 protected:
  void exchange_bytes(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*) override {
    refuse("an exchange");
  }
  void gather_bytes(const void*, void*, size_t) override { refuse("a gather"); }
  void broadcast_bytes(void*, size_t, int) override { refuse("a broadcast"); }

 private:
  [[noreturn]] static void refuse(const char* what) {
    throw Error("comm", detail::cat("a dry run does not communicate, but ", what, " was asked of it"),
                "this is a bug: a dry run only lays out memory");
  }
  int size_;
  int rank_;
};

}  // namespace

std::unique_ptr<Communicator> make_local() { return std::make_unique<LocalCommunicator>(); }

std::unique_ptr<Communicator> make_dry(int size, int rank) {
  FPDT_CHECK(size >= 1 && rank >= 0 && rank < size, "comm",
             detail::cat("a dry-run group of ", size, " ranks has no rank ", rank), "");
  return std::make_unique<DryCommunicator>(size, rank);
}

}  // namespace fpdt::comm

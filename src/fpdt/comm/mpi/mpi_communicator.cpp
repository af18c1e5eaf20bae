// The MPI backend (compiled when CMake finds MPI; mpi_stub.cpp otherwise). Every MPI call goes
// through FPDT_MPI_CHECK, which keeps the statement text; MPI errors return (MPI_ERRORS_RETURN)
// so they become fpdt::Errors that `main` prints before aborting the job.
// Counts above INT_MAX: every transfer is cut into messages of at most limits().message_bytes
// (default INT_MAX) bytes of MPI_BYTE — equal blocks and gathers that fit use MPI_Alltoall /
// MPI_Allgather, larger ones and every all_to_all_v use point-to-point messages (Isend/Irecv),
// broadcasts loop MPI_Bcast over pieces. No derived datatypes.
// Liveness: make_world starts the heartbeat watchdog (mpi_watchdog.h); finalize_at_exit stops it.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/comm/mpi/mpi_watchdog.h"
#include "fpdt/comm/mpi/mpi_world.h"
#include "fpdt/comm/text.h"

namespace fpdt::comm::mpi {

namespace {

[[noreturn]] void throw_mpi_error(int status, const char* statement, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS)
    length = std::snprintf(text, sizeof text, "MPI error %d", status);
  throw Error("comm",
              detail::cat("MPI call failed: ", statement, ": ", std::string_view(text, static_cast<size_t>(length)),
                          " (", file, ":", line, ")"),
              "if another rank failed first, its message names it");
}

// Checks an MPI call's status; the error names the statement, MPI's message, file and line.
#define FPDT_MPI_CHECK(call)                                                             \
  do {                                                                                   \
    const int fpdt_mpi_status_ = (call);                                                 \
    if (fpdt_mpi_status_ != MPI_SUCCESS)                                                 \
      throw_mpi_error(fpdt_mpi_status_, #call, __FILE__, __LINE__);                      \
  } while (0)

constexpr int kExchangeTag = 7001;
int g_world_rank = 0;  // this process's rank in MPI_COMM_WORLD, for abort messages

void finalize_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  stop_watchdog();
  MPI_Finalize();
}

int as_int(size_t bytes) { return static_cast<int>(bytes); }  // callers keep bytes ≤ message_bytes ≤ INT_MAX

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    FPDT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    FPDT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);  // no throw from a destructor; a failure here is harmless
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void barrier() override { FPDT_MPI_CHECK(MPI_Barrier(comm_)); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    FPDT_CHECK(color >= 0, "comm", "split: color must be >= 0", "");
    MPI_Comm part = MPI_COMM_NULL;
    FPDT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &part));
    return std::make_unique<MpiCommunicator>(part);
  }

  [[noreturn]] void abort(const std::string& reason) override { abort_job(reason); }

 protected:
  // Every rank learns what each peer sends it and compares with its recv_counts; the verdict is
  // agreed (MPI_MAX) so all ranks throw together instead of some waiting on a message never sent.
  void check_exchange_counts(const size_t* send_counts, const size_t* recv_counts) override {
    static_assert(sizeof(size_t) == sizeof(uint64_t), "counts travel as MPI_UINT64_T");
    std::vector<uint64_t> incoming(static_cast<size_t>(size_));  // (P) what rank j sends me
    FPDT_MPI_CHECK(MPI_Alltoall(send_counts, 1, MPI_UINT64_T, incoming.data(), 1, MPI_UINT64_T, comm_));
    int bad_from = -1;
    for (int j = 0; j < size_ && bad_from < 0; ++j)
      if (incoming[static_cast<size_t>(j)] != recv_counts[j]) bad_from = j;
    int any_bad = bad_from >= 0 ? 1 : 0;
    FPDT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any_bad, 1, MPI_INT, MPI_MAX, comm_));
    if (bad_from >= 0)
      throw detail::count_mismatch(bad_from, rank_, incoming[static_cast<size_t>(bad_from)], recv_counts[bad_from],
                                   "elements");
    if (any_bad)
      throw Error("comm", "all_to_all_v: send and receive counts disagree between other ranks of the group",
                  "send_counts[j] on rank i must equal recv_counts[i] on rank j");
  }

  void exchange_equal_bytes(const void* send, void* recv, size_t block_bytes) override {
    if (block_bytes > limits().message_bytes) return Communicator::exchange_equal_bytes(send, recv, block_bytes);
    FPDT_MPI_CHECK(MPI_Alltoall(send, as_int(block_bytes), MPI_BYTE, recv, as_int(block_bytes), MPI_BYTE, comm_));
  }

  // Point to point: from each peer, its block in messages of ≤ message_bytes (the same cut on both
  // sides, and MPI keeps messages between two ranks with one tag in order); the own block is copied.
  void exchange_bytes(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                      const size_t* recv_counts, const size_t* recv_displs) override {
    const size_t piece = limits().message_bytes;
    const char* send_bytes = static_cast<const char*>(send);
    char* recv_bytes = static_cast<char*>(recv);
    if (send_counts[rank_] != recv_counts[rank_])
      throw detail::count_mismatch(rank_, rank_, send_counts[rank_], recv_counts[rank_], "bytes");
    std::vector<MPI_Request> requests;
    for (int step = 1; step < size_; ++step) {
      const int from = (rank_ - step + size_) % size_;
      for (size_t done = 0; done < recv_counts[from]; done += piece) {
        requests.emplace_back();
        FPDT_MPI_CHECK(MPI_Irecv(recv_bytes + recv_displs[from] + done,
                                 as_int(std::min(piece, recv_counts[from] - done)), MPI_BYTE, from, kExchangeTag,
                                 comm_, &requests.back()));
      }
    }
    for (int step = 1; step < size_; ++step) {
      const int to = (rank_ + step) % size_;
      for (size_t done = 0; done < send_counts[to]; done += piece) {
        requests.emplace_back();
        FPDT_MPI_CHECK(MPI_Isend(send_bytes + send_displs[to] + done, as_int(std::min(piece, send_counts[to] - done)),
                                 MPI_BYTE, to, kExchangeTag, comm_, &requests.back()));
      }
    }
    if (send_counts[rank_] > 0 && recv_bytes + recv_displs[rank_] != send_bytes + send_displs[rank_])
      std::memcpy(recv_bytes + recv_displs[rank_], send_bytes + send_displs[rank_], send_counts[rank_]);
    FPDT_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  }

  void gather_bytes(const void* send, void* recv, size_t bytes_per_rank) override {
    char* own = static_cast<char*>(recv) + static_cast<size_t>(rank_) * bytes_per_rank;
    if (bytes_per_rank <= limits().message_bytes) {
      FPDT_MPI_CHECK(MPI_Allgather(send == own ? MPI_IN_PLACE : send, as_int(bytes_per_rank), MPI_BYTE, recv,
                                   as_int(bytes_per_rank), MPI_BYTE, comm_));
      return;
    }
    const size_t ranks = static_cast<size_t>(size_);
    std::vector<size_t> counts(ranks, bytes_per_rank), zeros(ranks, 0), displs(ranks);
    for (size_t j = 0; j < ranks; ++j) displs[j] = j * bytes_per_rank;
    exchange_bytes(send, counts.data(), zeros.data(), recv, counts.data(), displs.data());
  }

  void broadcast_bytes(void* data, size_t bytes, int root) override {
    const size_t piece = limits().message_bytes;
    for (size_t done = 0; done < bytes; done += piece)
      FPDT_MPI_CHECK(
          MPI_Bcast(static_cast<char*>(data) + done, as_int(std::min(piece, bytes - done)), MPI_BYTE, root, comm_));
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

void abort_job(const std::string& reason) {
  std::fprintf(stderr, "rank %d: %s\n", g_world_rank, reason.c_str());
  std::fflush(nullptr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this is for the compiler and for broken MPIs
}

bool built() { return true; }

std::unique_ptr<Communicator> make_world(int* argc, char*** argv) {
  int initialized = 0;
  FPDT_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    FPDT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    std::atexit(finalize_at_exit);
  }
  FPDT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  FPDT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank));
  MPI_Comm world = MPI_COMM_NULL;
  FPDT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));  // inherits MPI_ERRORS_RETURN
  // The watchdog runs only where this process owns MPI (finalize_at_exit stops it before
  // MPI_Finalize) and MPI lets a second thread call it.
  if (!initialized) {
    if (provided < MPI_THREAD_MULTIPLE)
      throw Error("comm", "this MPI library does not support MPI_THREAD_MULTIPLE, which the liveness watchdog needs",
                  "use an MPI built with thread support (Open MPI 4 and MPICH have it)");
    MPI_Comm heartbeats = MPI_COMM_NULL;
    FPDT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &heartbeats));
    start_watchdog(heartbeats);
  }
  return std::make_unique<MpiCommunicator>(world);
}

}  // namespace fpdt::comm::mpi

// The communicator: one rank's view of a group of P ranks, and the collectives FPDT needs
// (Ulysses all-to-all, gradient all-reduce, gathers for metrics). Backends: local (P = 1), threads
// (P ranks in one process, for tests; threads.h), MPI (mpi/), NCCL over device buffers (nccl/). It
// does not know tensors, layouts or chunks: it moves bytes and sums floats. Collectives are called
// by every rank of the group in the same order with agreeing sizes; a failed rank ends the job,
// never hangs it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace fpdt::comm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "local", "threads", "mpi" or "nccl" (for the configuration table).
  virtual std::string backend() const = 0;

  // Equal blocks. send: (P, count) — block j goes to rank j; recv: (P, count) — block j came from
  // rank j. send and recv must not overlap.
  void all_to_all(const float* send, float* recv, size_t count);
  // Variable blocks; counts and displacements in elements, one per rank (arrays of size()).
  // send_counts[j] on rank i must equal recv_counts[i] on rank j (checked: a mismatch throws).
  void all_to_all_v(const float* send, const size_t* send_counts, const size_t* send_displs,
                    float* recv, const size_t* recv_counts, const size_t* recv_displs);
  // data (count) = the sum over ranks, in place. The order is fixed: every element is the serial
  // sum ((x_0 + x_1) + x_2) + … over ranks 0..P−1, so the result is bitwise the same on every
  // rank, from run to run, and across backends (reduce-scatter + all-gather, no tree).
  void all_reduce_sum(float* data, size_t count);
  void all_reduce_sum(double* data, size_t count);
  // send: bytes_per_rank; recv: (P, bytes_per_rank) — block j came from rank j.
  void all_gather(const void* send, void* recv, size_t bytes_per_rank);
  // ZeRO's collectives over blocks of different sizes, counts[j] elements for rank j (the same array
  // on every rank), laid out in rank order: block j at Σ_{i<j} counts[i].
  // reduce_scatter_sum: send (Σ counts) holds every rank's block; recv (counts[rank]) = the sum over
  // ranks of their block `rank`, in all_reduce_sum's fixed order (((x_0 + x_1) + x_2) + …), so it is
  // bitwise what all_reduce_sum gives for those elements; with add, recv += that sum. recv may be this
  // rank's block of send (in place, without add).
  void reduce_scatter_sum(const float* send, float* recv, const size_t* counts, bool add = false);
  // all_gather_v: send (counts[rank] bytes); recv (Σ counts bytes) = every rank's block. send may be
  // this rank's block of recv (in place).
  void all_gather_v(const void* send, void* recv, const size_t* counts);
  // data (bytes): the root's bytes on every rank.
  void broadcast(void* data, size_t bytes, int root);
  virtual void barrier() = 0;

  // Collective: ranks with the same color form a new group, ranked by key (ties by this group's
  // rank), like MPI_Comm_split. color ≥ 0. Used for DP × SP groups. The new communicator counts
  // its own bytes_sent.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Ends the whole job (every rank) promptly, printing "rank R: <reason>" (R = rank in the world).
  // The threads backend cannot end the process: it fails the whole run_ranks() group instead and
  // throws from this rank.
  [[noreturn]] virtual void abort(const std::string& reason) = 0;

  // Payload bytes this rank addressed to OTHER ranks (blocks to itself excluded) since the last
  // reset, as the collective's definition sends them (not how a backend's algorithm routes them):
  //   all_to_all        (P−1)·count·4          — (P−1)/P of the send buffer
  //   all_to_all_v      Σ_{j≠rank} send_counts[j]·4
  //   all_reduce_sum    Σ_{j≠rank} |seg_j| + (P−1)·|seg_rank| elements ≈ 2·(P−1)/P·count
  //   all_gather        (P−1)·bytes_per_rank
  //   reduce_scatter_sum Σ_{j≠rank} counts[j]·4
  //   all_gather_v      (P−1)·counts[rank]
  //   broadcast         (P−1)·bytes on the root, 0 elsewhere
  // Control traffic (barrier, split, count checks) is not counted.
  uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  void reset_bytes_sent() { bytes_sent_.store(0, std::memory_order_relaxed); }

 protected:
  Communicator() = default;

  // Backend primitives. Arguments are checked and bytes counted by the public functions; all
  // counts, displacements and sizes are in BYTES and may exceed INT_MAX.
  // Rank j receives send + send_displs[j] (send_counts[j] bytes) at its recv + recv_displs[me].
  virtual void exchange_bytes(const void* send, const size_t* send_counts, const size_t* send_displs,
                              void* recv, const size_t* recv_counts, const size_t* recv_displs) = 0;
  // Equal blocks of block_bytes; default: exchange_bytes with computed counts.
  virtual void exchange_equal_bytes(const void* send, void* recv, size_t block_bytes);
  // Called by all_to_all_v before exchange_bytes: throws when a peer's send count for this rank
  // differs from recv_counts (the threads backend checks inside exchange_bytes; default: nothing).
  virtual void check_exchange_counts(const size_t* send_counts, const size_t* recv_counts) {}
  virtual void gather_bytes(const void* send, void* recv, size_t bytes_per_rank) = 0;
  virtual void broadcast_bytes(void* data, size_t bytes, int root) = 0;

  // The collectives' own work on their buffers' memory: host memory by default; a communicator over
  // device buffers (NCCL) overrides all three, so the reductions above run on it unchanged.
  // Scratch of `bytes`, alive as long as the pointer is held.
  virtual std::shared_ptr<void> scratch(size_t bytes);
  // dst (n) = ((b_0 + b_1) + b_2) + … + b_{P−1}, b_j = blocks + j·n, P = ranks (rank order, the fixed
  // order all_reduce_sum promises); with add, dst += that sum. dst does not overlap blocks.
  virtual void sum_blocks(float* dst, const float* blocks, size_t ranks, size_t n, bool add);
  virtual void sum_blocks(double* dst, const double* blocks, size_t ranks, size_t n, bool add);
  virtual void copy_bytes(void* dst, const void* src, size_t bytes);

 private:
  template <typename T>
  void all_reduce_sum_impl(T* data, size_t count);
  void add_bytes_sent(uint64_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }

  std::atomic<uint64_t> bytes_sent_{0};
};

// How big one backend message and one all-reduce piece may be. The defaults suit real runs:
// message_bytes = INT_MAX (MPI counts are int: larger blocks are sent as several messages) and
// reduce_piece_bytes = 64 MiB (the all-reduce's scratch, whatever the array's size). Tests shrink
// both so the piece loops run on small arrays. Must be the same on every rank; process-wide.
struct Limits {
  size_t message_bytes;
  size_t reduce_piece_bytes;
};
Limits limits();
void set_limits(const Limits& limits);
Limits default_limits();

// Liveness: how long, in seconds, a rank waits for a peer that shows no sign of life (default 600;
// > 0; process-wide, the same on every rank). A slow step is never taken for a hang:
//   MPI      each process has a thread of its own that sends a heartbeat every heartbeat_seconds()
//            to the rank before it in a ring and watches the one after it; a rank silent for the
//            deadline (stopped by SIGSTOP, frozen, cut off) makes its watcher end the job with
//            "rank W: [comm] rank R sent no heartbeat for D s ...". Ranks busy computing, saving or
//            waiting in a collective keep beating, so any wait for a live peer is allowed.
//   threads  the ranks are threads of one process, alive by construction: a collective whose peers
//            have not all arrived within the deadline fails the run, naming the ranks missing.
//   local    nothing to wait for.
inline constexpr double kDefaultDeadlineSeconds = 600.0;
double deadline_seconds();
// Throws fpdt::Error unless 0 < seconds (finite). Takes effect at once, also for a running watchdog.
void set_deadline_seconds(double seconds);
// The heartbeat period: min(1 s, deadline / 10), so a deadline spans at least ten beats.
double heartbeat_seconds();

// A communicator of one rank (copies its own blocks).
std::unique_ptr<Communicator> make_local();

// Rank `rank` of a group of `size` ranks that exist only on paper: --dry-run lays out one rank of a
// world it never starts (the sizes of its shards and chunks depend on the rank and the group's size).
// rank() and size() answer; every collective, split and barrier throws: a dry run never communicates.
std::unique_ptr<Communicator> make_dry(int size, int rank);

// The world: the MPI communicator when this process was started by mpirun/mpiexec (any size;
// MPI_Init_thread here, MPI_Finalize at exit), else local — a plain run never initialises MPI.
// A build without MPI launched by mpirun with several ranks throws fpdt::Error ("built without
// MPI"), and so do several tasks of Slurm's srun without a PMI (srun --mpi=none). Sets
// fpdt::log::set_rank. Call once per process, before any other thread uses MPI.
std::unique_ptr<Communicator> make_world(int* argc, char*** argv);

// The world size the launcher announced in the environment (Open MPI, MPICH/Hydra, MVAPICH, Slurm's
// srun with PMIx or PMI-2), or 0 when this process was not started by mpirun/mpiexec/srun.
int launched_world_size();

// Whether this build has the MPI backend (CMake found MPI).
bool mpi_built();

// A communicator over DEVICE buffers, for the CUDA backend's compute tier (comm/nccl/): NCCL, queued
// on `cuda_stream` (the backend's compute stream, a cudaStream_t: kernels queued after a collective see
// its result; the call itself does not wait), on the GPU that is current (the CUDA backend chose it by
// local rank). Its ranks are `bootstrap`'s, which also carries its host-side work (the setup, barrier,
// count checks, split and abort) and must outlive it. Every buffer of its collectives is device memory;
// host values (losses, metrics) stay on `bootstrap`. A build without NCCL throws "built without NCCL".
std::unique_ptr<Communicator> make_nccl(Communicator& bootstrap, void* cuda_stream);

// Whether this build has the NCCL backend (CMake found the CUDA toolkit and NCCL).
bool nccl_built();

// The communicator for collectives over a backend's compute-tier buffers: NCCL over `world` when those
// are device memory (the cuda backend) and the group has several ranks, else a duplicate of `world`
// (host memory: the same backend; one rank: no collective moves device bytes, the pipeline copies).
std::unique_ptr<Communicator> make_compute_comm(Communicator& world, bool device_buffers, void* cuda_stream);

}  // namespace fpdt::comm

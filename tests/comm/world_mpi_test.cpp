// The MPI communicator, run by ctest under `mpirun -np P` for P ∈ {1, 2, 4}: the same collective
// checks as the threads backend (bitwise), with the default and with tiny message sizes (the
// path that carries blocks above INT_MAX bytes), DP × SP splits, bytes_sent, and agreement with
// the threads backend bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "comm/collective_checks.h"
#include "comm/mpi_testing.h"
#include "fpdt/base/log.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/comm/threads/thread_communicator.h"

namespace fpdt::comm {
namespace {

using testing::world;

TEST(World, IsMpiWhenStartedByMpirun) {
  EXPECT_EQ(log::rank(), world().rank());
  if (launched_world_size() == 0) GTEST_SKIP() << "not started by mpirun: the world is local";
  EXPECT_TRUE(mpi_built());
  EXPECT_EQ(world().backend(), "mpi");
  EXPECT_EQ(world().size(), launched_world_size());
}

TEST(World, AllCollectivesMoveAndSumExactly) {
  testing::check_all_collectives(world(), testing::agreed_seed(world()));
}

TEST(World, AllCollectivesWithSmallMessagesAndReducePieces) {
  const uint64_t seed = testing::agreed_seed(world());
  testing::SmallPieces small;
  testing::check_all_collectives(world(), seed);
}

TEST(World, BytesSentIsTheClosedForm) {
  Communicator& comm = world();
  const int ranks = comm.size();
  const size_t count = 1 << 16;  // elements per destination rank
  std::vector<float> send(ranks * count, 1.0f), recv(ranks * count);
  comm.reset_bytes_sent();
  for (int step = 0; step < 3; ++step) comm.all_to_all(send.data(), recv.data(), count);
  const uint64_t buffer_bytes = ranks * count * sizeof(float);
  EXPECT_EQ(comm.bytes_sent(), 3 * buffer_bytes * (ranks - 1) / ranks);
}

// The deterministic all-reduce gives the same bits over MPI as over threads.
TEST(World, AllReduceAgreesWithTheThreadsBackendBitwise) {
  Communicator& comm = world();
  const uint64_t seed = testing::agreed_seed(comm);
  const size_t n = 100003;
  std::vector<float> over_mpi = testing::rank_values<float>(seed, comm.rank(), 11, n);
  comm.all_reduce_sum(over_mpi.data(), n);
  std::vector<float> over_threads;
  run_ranks(comm.size(), [&](Communicator& local) {
    std::vector<float> data = testing::rank_values<float>(seed, local.rank(), 11, n);
    local.all_reduce_sum(data.data(), n);
    if (local.rank() == comm.rank()) over_threads = data;
  });
  testing::expect_bitwise_equal(over_mpi, over_threads, "MPI vs threads all_reduce_sum");
}

// Every rank learns of a count mismatch (no rank is left waiting for a message never sent).
TEST(World, MismatchedCountsThrowOnEveryRank) {
  Communicator& comm = world();
  const int ranks = comm.size(), last = ranks - 1;
  std::vector<size_t> send_counts(ranks, 2), recv_counts(ranks, 2), displs(ranks);
  for (int j = 0; j < ranks; ++j) displs[j] = 3 * j;
  if (comm.rank() == 0) recv_counts[last] = 3;  // rank 0 expects one element more from the last rank
  std::vector<float> send(3 * ranks, 1.0f), recv(3 * ranks);
  const std::string message = fpdt::testing::error_message([&] {
    comm.all_to_all_v(send.data(), send_counts.data(), displs.data(), recv.data(), recv_counts.data(), displs.data());
  });
  if (comm.rank() == 0)
    fpdt::testing::expect_contains(message, {"rank " + std::to_string(last) + " sends 2 elements to rank 0 but rank 0 expects 3"});
  else
    fpdt::testing::expect_contains(message, {"counts disagree between other ranks"});
  comm.barrier();
}

}  // namespace
}  // namespace fpdt::comm

// The local and threads communicators: every collective moves every byte to the right place and
// sums in rank order (bitwise), DP × SP splits, bytes_sent's closed form, and failure: a rank that
// throws, aborts, returns early, misses the deadline or disagrees on counts never hangs the others.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/collective_checks.h"
#include "fpdt/base/error.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/comm/threads/thread_communicator.h"
#include "testing.h"

namespace fpdt::comm {
namespace {

using fpdt::testing::expect_contains;
using fpdt::testing::fresh_seed;

class Threads : public ::testing::TestWithParam<int> {};

TEST_P(Threads, AllCollectivesMoveAndSumExactly) {
  const uint64_t seed = fresh_seed();
  run_ranks(GetParam(), [&](Communicator& comm) {
    EXPECT_EQ(comm.size(), GetParam());
    EXPECT_EQ(comm.backend(), "threads");
    testing::check_all_collectives(comm, seed);
  });
}

TEST_P(Threads, AllCollectivesWithSmallMessagesAndReducePieces) {
  const uint64_t seed = fresh_seed();
  testing::SmallPieces small;
  run_ranks(GetParam(), [&](Communicator& comm) { testing::check_all_collectives(comm, seed); });
}

TEST_P(Threads, AllReduceIsBitwiseTheSameAcrossRuns) {
  const uint64_t seed = fresh_seed();
  const int ranks = GetParam();
  const size_t n = 10007;
  std::vector<std::vector<float>> results(2, std::vector<float>(ranks * n));  // (run) (P, n)
  for (int run = 0; run < 2; ++run) {
    run_ranks(ranks, [&](Communicator& comm) {
      std::vector<float> data = testing::rank_values<float>(seed, comm.rank(), 9, n);
      comm.all_reduce_sum(data.data(), n);
      std::copy(data.begin(), data.end(), results[run].begin() + comm.rank() * n);
    });
  }
  testing::expect_bitwise_equal(results[0], results[1], "two runs of run_ranks");
  for (int j = 1; j < ranks; ++j)
    testing::expect_bitwise_equal(results[0].data() + j * n, results[0].data(), n * sizeof(float),
                                  "rank " + std::to_string(j) + " vs rank 0");
}

// Ulysses' re-layout volume: each rank keeps 1/P of its all-to-all buffer and sends the rest.
TEST_P(Threads, BytesSentIsTheClosedForm) {
  const int ranks = GetParam();
  run_ranks(ranks, [&](Communicator& comm) {
    const size_t count = 4096;  // elements per destination rank
    std::vector<float> send(ranks * count, 1.0f), recv(ranks * count);
    comm.reset_bytes_sent();
    for (int step = 0; step < 3; ++step) comm.all_to_all(send.data(), recv.data(), count);
    const uint64_t buffer_bytes = ranks * count * sizeof(float);
    EXPECT_EQ(comm.bytes_sent(), 3 * buffer_bytes * (ranks - 1) / ranks);
    comm.reset_bytes_sent();
    EXPECT_EQ(comm.bytes_sent(), 0u);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Threads, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return "P" + std::to_string(info.param); });

TEST(Local, AllCollectivesOnOneRank) {
  const uint64_t seed = fresh_seed();
  std::unique_ptr<Communicator> local = make_local();
  EXPECT_EQ(local->rank(), 0);
  EXPECT_EQ(local->size(), 1);
  EXPECT_EQ(local->backend(), "local");
  testing::check_all_collectives(*local, seed);
}

TEST(Local, WorldIsLocalWithoutALauncher) {
  if (launched_world_size() > 0) GTEST_SKIP() << "started by mpirun";
  int argc = 1;
  char name[] = "threads_test";
  char* args[] = {name, nullptr};
  char** argv = args;
  std::unique_ptr<Communicator> world = make_world(&argc, &argv);
  EXPECT_EQ(world->backend(), "local");
  EXPECT_EQ(world->size(), 1);
}

// Runs `body` on P ranks and returns run_ranks' error message and how long it took.
template <typename Body>
std::pair<std::string, double> failing_run(int ranks, Body body) {
  const auto start = std::chrono::steady_clock::now();
  std::string message = fpdt::testing::error_message([&] { run_ranks(ranks, body); });
  return {message, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

TEST(ThreadsFailure, RankThatThrowsMidCollectiveFailsTheRunNamingIt) {
  std::mutex mutex;
  std::vector<std::string> seen(4);  // what each other rank's collective threw
  auto [message, seconds] = failing_run(4, [&](Communicator& comm) {
    std::vector<float> send(4 * 256, 1.0f), recv(4 * 256);
    try {
      for (int step = 0; step < 100000; ++step) {
        if (comm.rank() == 2 && step == 3) throw Error("test", "injected failure at step 3");
        comm.all_to_all(send.data(), recv.data(), 256);
      }
    } catch (const Error& error) {
      std::lock_guard<std::mutex> lock(mutex);
      seen[comm.rank()] = error.what();
      throw;
    }
  });
  EXPECT_LT(seconds, 1.0);
  expect_contains(message, {"[comm] rank 2 failed: ", "[test] injected failure at step 3"});
  for (int r : {0, 1, 3}) expect_contains(seen[r], {"[comm] rank 2 failed: [test] injected failure at step 3"});
}

TEST(ThreadsFailure, FailureWakesRanksWaitingInOtherSubGroups) {
  auto [message, seconds] = failing_run(4, [&](Communicator& comm) {
    std::unique_ptr<Communicator> sp = comm.split(comm.rank() / 2, comm.rank());  // {0, 1}, {2, 3}
    if (comm.rank() == 1) throw Error("test", "rank one gives up");
    double value = 1.0;
    for (;;) sp->all_reduce_sum(&value, 1);  // ranks 2, 3 would run forever without the failure
  });
  EXPECT_LT(seconds, 1.0);
  expect_contains(message, {"rank 1 failed", "rank one gives up"});
}

TEST(ThreadsFailure, AbortFailsTheRunWithTheReason) {
  auto [message, seconds] = failing_run(3, [&](Communicator& comm) {
    comm.barrier();
    if (comm.rank() == 1) comm.abort("bad configuration on this rank");
    comm.barrier();
  });
  EXPECT_LT(seconds, 1.0);
  expect_contains(message, {"rank 1 failed: bad configuration on this rank"});
}

TEST(ThreadsFailure, RankThatReturnsEarlyIsNamedInsteadOfAHang) {
  auto [message, seconds] = failing_run(3, [&](Communicator& comm) {
    comm.barrier();
    if (comm.rank() == 0) return;  // one collective fewer than the others
    comm.barrier();
  });
  EXPECT_LT(seconds, 1.0);
  expect_contains(message, {"rank 0 returned while rank", "waits for it in a collective"});
}

TEST(ThreadsFailure, MismatchedCountsAreAnError) {
  auto [message, seconds] = failing_run(2, [&](Communicator& comm) {
    std::vector<float> send(8, 1.0f), recv(8);
    const size_t send_counts[2] = {2, 2}, displs[2] = {0, 4};
    const size_t recv_counts[2] = {2, comm.rank() == 0 ? size_t{3} : size_t{2}};  // rank 0 expects 3 from rank 1
    comm.all_to_all_v(send.data(), send_counts, displs, recv.data(), recv_counts, displs);
  });
  EXPECT_LT(seconds, 1.0);
  expect_contains(message, {"rank 0 failed", "rank 1 sends 8 bytes to rank 0 but rank 0 expects 12"});
}

// Sets the collective deadline for one test, and puts the default back.
struct ScopedDeadline {
  explicit ScopedDeadline(double seconds) { set_deadline_seconds(seconds); }
  ~ScopedDeadline() { set_deadline_seconds(kDefaultDeadlineSeconds); }
};

TEST(ThreadsFailure, RankThatMissesTheDeadlineIsNamed) {
  ScopedDeadline deadline(0.2);
  auto [message, seconds] = failing_run(3, [&](Communicator& comm) {
    comm.barrier();
    if (comm.rank() == 2) std::this_thread::sleep_for(std::chrono::seconds(1));  // hung, as far as the others see
    comm.barrier();
  });
  // Rank 0 or rank 1, whichever gives up first, names rank 2.
  expect_contains(message, {"[comm] rank 2 failed: did not reach a collective within the 0.2 s deadline (rank ",
                            " waited; ranks missing: 2)"});
}

TEST(ThreadsFailure, DeadlineHoldsInSubGroups) {
  ScopedDeadline deadline(0.2);
  auto [message, seconds] = failing_run(4, [&](Communicator& comm) {
    std::unique_ptr<Communicator> pair = comm.split(comm.rank() / 2, comm.rank());  // {0, 1}, {2, 3}
    if (comm.rank() >= 2) {
      pair->barrier();
      if (comm.rank() == 3) std::this_thread::sleep_for(std::chrono::seconds(1));
      pair->barrier();
    }
  });
  expect_contains(message, {"[comm] rank 3 failed: did not reach a collective within the 0.2 s deadline",
                            "(rank 2 waited; ranks missing: 3)"});
}

TEST(ThreadsFailure, ASlowRankWithinTheDeadlineIsWaitedFor) {
  ScopedDeadline deadline(30);
  run_ranks(3, [&](Communicator& comm) {
    if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    double value = comm.rank();
    comm.all_reduce_sum(&value, 1);
    EXPECT_EQ(value, 3.0);
  });
}

TEST(ThreadsFailure, DeadlineMustBePositive) {
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()})
    expect_contains(fpdt::testing::error_message([&] { set_deadline_seconds(bad); }),
                    {"[comm] the collective deadline must be a positive number of seconds"});
  EXPECT_EQ(deadline_seconds(), kDefaultDeadlineSeconds);
  EXPECT_EQ(heartbeat_seconds(), 1.0);
}

TEST(ThreadsFailure, BadArgumentsAreErrors) {
  std::unique_ptr<Communicator> local = make_local();
  float value = 1.0f;
  expect_contains(fpdt::testing::error_message([&] { local->broadcast(&value, 4, 1); }),
                  {"[comm] broadcast root 1 is not a rank of a group of 1"});
  expect_contains(fpdt::testing::error_message([&] { local->split(-1, 0); }), {"color must be >= 0"});
  std::vector<float> buffer(4);
  expect_contains(fpdt::testing::error_message([&] { local->all_to_all(buffer.data(), buffer.data() + 1, 2); }),
                  {"send and recv overlap"});
  expect_contains(fpdt::testing::error_message([&] { run_ranks(0, [](Communicator&) {}); }), {"run_ranks: 0 ranks"});
}

}  // namespace
}  // namespace fpdt::comm

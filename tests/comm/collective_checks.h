// Collective checks shared by the threads/local tests and the MPI tests: each runs on every rank
// of a group with one agreed seed. Rank q's inputs are a pure function of (seed, q, what), so every
// rank computes the exact expected result locally; data movement and the rank-ordered sum are
// exact, so comparisons are bitwise. Checks only use EXPECT_* (never return early), so every rank
// keeps calling the same collectives even when one of them sees a failure.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/comm/communicator.h"
#include "testing.h"

namespace fpdt::comm::testing {

// Rank q's n inputs for the check named by `salt`; magnitudes differ by rank so that a sum in
// another order would round differently.
template <typename T>
std::vector<T> rank_values(uint64_t seed, int rank, uint64_t salt, size_t n) {
  Rng rng(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank + 1)) ^ (salt * 0xbf58476d1ce4e5b9ull));
  return fpdt::testing::random_normal<T>(rng, n, rank % 2 == 0 ? 1.0 : 37.0);
}

// Bitwise equality of two byte ranges; reports the first differing byte.
inline void expect_bitwise_equal(const void* got, const void* want, size_t bytes, const std::string& what) {
  if (bytes == 0 || std::memcmp(got, want, bytes) == 0) return;
  size_t at = 0;
  while (static_cast<const unsigned char*>(got)[at] == static_cast<const unsigned char*>(want)[at]) ++at;
  ADD_FAILURE() << what << ": differs first at byte " << at << " of " << bytes;
}

template <typename T>
void expect_bitwise_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  expect_bitwise_equal(got.data(), want.data(), got.size() * sizeof(T), what);
}

inline std::string where(const Communicator& comm) {
  return "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) + " (" + comm.backend() + ")";
}

// all_to_all: recv block j on rank r is bitwise rank j's send block r; (P−1)·count·4 bytes sent.
inline void check_all_to_all(Communicator& comm, uint64_t seed) {
  SCOPED_TRACE(where(comm));
  const int ranks = comm.size(), me = comm.rank();
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
    const std::vector<float> send = rank_values<float>(seed, me, 100 + count, ranks * count);  // (P, count)
    std::vector<float> recv(ranks * count, -1.0f);                                               // (P, count)
    comm.reset_bytes_sent();
    comm.all_to_all(send.data(), recv.data(), count);
    EXPECT_EQ(comm.bytes_sent(), static_cast<uint64_t>(ranks - 1) * count * sizeof(float)) << "count " << count;
    for (int j = 0; j < ranks; ++j) {
      const std::vector<float> theirs = rank_values<float>(seed, j, 100 + count, ranks * count);
      expect_bitwise_equal(recv.data() + j * count, theirs.data() + me * count, count * sizeof(float),
                           "all_to_all block from rank " + std::to_string(j) + ", count " + std::to_string(count));
    }
  }
}

// all_to_all_v layout: rank q sends c(q, j) elements to rank j (some zero); send blocks are in
// rank order with 3-element gaps, receive blocks in reverse rank order with 5-element gaps.
inline size_t v_count(uint64_t seed, int from, int to) {
  Rng rng(seed ^ (static_cast<uint64_t>(from) * 1000003u + static_cast<uint64_t>(to) * 7919u + 17u));
  const uint64_t draw = rng.below(64);
  return draw < 8 ? 0 : static_cast<size_t>(draw);
}
struct VLayout {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  size_t send_total = 0, recv_total = 0;
};
inline VLayout v_layout(uint64_t seed, int me, int ranks) {
  VLayout layout;
  for (int j = 0; j < ranks; ++j) {
    layout.send_counts.push_back(v_count(seed, me, j));
    layout.send_displs.push_back(layout.send_total);
    layout.send_total += layout.send_counts.back() + 3;
  }
  layout.recv_counts.resize(ranks);
  layout.recv_displs.resize(ranks);
  for (int j = ranks - 1; j >= 0; --j) {
    layout.recv_counts[j] = v_count(seed, j, me);
    layout.recv_displs[j] = layout.recv_total;
    layout.recv_total += layout.recv_counts[j] + 5;
  }
  return layout;
}

inline void check_all_to_all_v(Communicator& comm, uint64_t seed) {
  SCOPED_TRACE(where(comm));
  const int ranks = comm.size(), me = comm.rank();
  const float kUntouched = -12345.0f;
  const VLayout layout = v_layout(seed, me, ranks);
  const std::vector<float> send = rank_values<float>(seed, me, 200, layout.send_total);
  std::vector<float> recv(layout.recv_total, kUntouched), want(layout.recv_total, kUntouched);
  uint64_t want_bytes = 0;
  for (int j = 0; j < ranks; ++j) {
    const VLayout theirs = v_layout(seed, j, ranks);
    const std::vector<float> their_send = rank_values<float>(seed, j, 200, theirs.send_total);
    std::memcpy(want.data() + layout.recv_displs[j], their_send.data() + theirs.send_displs[me],
                layout.recv_counts[j] * sizeof(float));
    if (j != me) want_bytes += layout.send_counts[j] * sizeof(float);
  }
  comm.reset_bytes_sent();
  comm.all_to_all_v(send.data(), layout.send_counts.data(), layout.send_displs.data(), recv.data(),
                    layout.recv_counts.data(), layout.recv_displs.data());
  expect_bitwise_equal(recv, want, "all_to_all_v receive buffer (blocks and untouched gaps)");
  EXPECT_EQ(comm.bytes_sent(), want_bytes);
}

// all_reduce_sum: bitwise the serial sum over ranks 0..P−1, the same on every rank and on a rerun;
// 2·(P−1)·n/P elements sent when P divides n (and n fits one piece).
template <typename T>
void check_all_reduce_sum(Communicator& comm, uint64_t seed) {
  SCOPED_TRACE(where(comm));
  const int ranks = comm.size(), me = comm.rank();
  for (size_t n : {size_t{1}, size_t{3}, size_t{1003}, size_t{4096}}) {
    const uint64_t salt = 300 + n + sizeof(T);
    std::vector<T> want = rank_values<T>(seed, 0, salt, n);
    for (int q = 1; q < ranks; ++q) {
      const std::vector<T> x = rank_values<T>(seed, q, salt, n);
      for (size_t i = 0; i < n; ++i) want[i] += x[i];
    }
    std::vector<T> first;
    for (int run = 0; run < 2; ++run) {
      std::vector<T> data = rank_values<T>(seed, me, salt, n);
      comm.reset_bytes_sent();
      comm.all_reduce_sum(data.data(), n);
      const uint64_t sent = comm.bytes_sent();
      expect_bitwise_equal(data, want, "all_reduce_sum vs the serial sum, n " + std::to_string(n));
      if (run == 0) {
        first = data;
      } else {
        expect_bitwise_equal(data, first, "all_reduce_sum rerun, n " + std::to_string(n));
      }
      if (n % static_cast<size_t>(ranks) == 0 && n * sizeof(T) <= limits().reduce_piece_bytes) {
        EXPECT_EQ(sent, 2 * static_cast<uint64_t>(ranks - 1) * (n / ranks) * sizeof(T)) << "n " << n;
      }
      std::vector<T> everyone(n * ranks);  // (P, n) every rank's result
      comm.all_gather(data.data(), everyone.data(), n * sizeof(T));
      for (int j = 0; j < ranks; ++j)
        expect_bitwise_equal(everyone.data() + j * n, data.data(), n * sizeof(T),
                             "all_reduce_sum result of rank " + std::to_string(j) + " vs this rank's");
    }
  }
}

// all_gather: block j is rank j's bytes (odd sizes; also in place); (P−1)·bytes sent.
inline void check_all_gather(Communicator& comm, uint64_t seed) {
  SCOPED_TRACE(where(comm));
  const int ranks = comm.size(), me = comm.rank();
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{1001}, size_t{40000}}) {
    auto rank_bytes = [&](int q) {
      std::vector<unsigned char> values(bytes);
      Rng rng(seed ^ (static_cast<uint64_t>(q) << 32) ^ bytes);
      for (auto& value : values) value = static_cast<unsigned char>(rng.below(256));
      return values;
    };
    const std::vector<unsigned char> mine = rank_bytes(me);
    std::vector<unsigned char> recv(ranks * bytes, 0xAB), in_place(ranks * bytes, 0xCD);
    comm.reset_bytes_sent();
    comm.all_gather(mine.data(), recv.data(), bytes);
    EXPECT_EQ(comm.bytes_sent(), static_cast<uint64_t>(ranks - 1) * bytes);
    if (bytes > 0) std::memcpy(in_place.data() + me * bytes, mine.data(), bytes);
    comm.all_gather(in_place.data() + me * bytes, in_place.data(), bytes);
    for (int j = 0; j < ranks; ++j) {
      const std::vector<unsigned char> theirs = rank_bytes(j);
      expect_bitwise_equal(recv.data() + j * bytes, theirs.data(), bytes,
                           "all_gather block of rank " + std::to_string(j) + ", bytes " + std::to_string(bytes));
      expect_bitwise_equal(in_place.data() + j * bytes, theirs.data(), bytes,
                           "in-place all_gather block of rank " + std::to_string(j));
    }
  }
}

// Block sizes for the variable-block collectives: some zero, one longer than the others (so some
// ranks have no piece in the last rounds), the same on every rank.
inline std::vector<size_t> v_blocks(uint64_t seed, int ranks, size_t longest) {
  std::vector<size_t> counts;
  for (int j = 0; j < ranks; ++j) counts.push_back(j == ranks / 2 ? longest : static_cast<size_t>(v_count(seed, j, 99)));
  return counts;
}

// reduce_scatter_sum: recv is bitwise the serial sum over ranks 0..P−1 of their block `rank` (what
// all_reduce_sum gives for those elements), also in place; Σ_{j≠rank} counts[j]·4 bytes sent.
inline void check_reduce_scatter_sum(Communicator& comm, uint64_t seed) {
  SCOPED_TRACE(where(comm));
  const int ranks = comm.size(), me = comm.rank();
  for (size_t longest : {size_t{0}, size_t{5}, size_t{1003}, size_t{40000}}) {
    const std::vector<size_t> counts = v_blocks(seed + longest, ranks, longest);
    size_t total = 0, my_begin = 0;
    uint64_t want_bytes = 0;
    for (int j = 0; j < ranks; ++j) {
      if (j == me) my_begin = total;
      total += counts[j];
      if (j != me) want_bytes += counts[j] * sizeof(float);
    }
    const uint64_t salt = 700 + longest;
    std::vector<float> want = rank_values<float>(seed, 0, salt, total);
    for (int q = 1; q < ranks; ++q) {
      const std::vector<float> x = rank_values<float>(seed, q, salt, total);
      for (size_t i = 0; i < total; ++i) want[i] += x[i];
    }
    const std::vector<float> send = rank_values<float>(seed, me, salt, total);
    std::vector<float> recv(counts[me], -1.0f);
    comm.reset_bytes_sent();
    comm.reduce_scatter_sum(send.data(), recv.data(), counts.data());
    EXPECT_EQ(comm.bytes_sent(), want_bytes) << "longest " << longest;
    expect_bitwise_equal(recv.data(), want.data() + my_begin, counts[me] * sizeof(float),
                         "reduce_scatter_sum vs the serial sum, longest " + std::to_string(longest));
    std::vector<float> in_place = send;
    comm.reduce_scatter_sum(in_place.data(), in_place.data() + my_begin, counts.data());
    expect_bitwise_equal(in_place.data() + my_begin, want.data() + my_begin, counts[me] * sizeof(float),
                         "in-place reduce_scatter_sum, longest " + std::to_string(longest));
    // add: recv + the sum, the sum formed first (as the accumulation of micro-batches does).
    std::vector<float> added = rank_values<float>(seed, me, salt + 1, counts[me]), want_added = added;
    for (size_t i = 0; i < counts[me]; ++i) want_added[i] += want[my_begin + i];
    comm.reduce_scatter_sum(send.data(), added.data(), counts.data(), true);
    expect_bitwise_equal(added, want_added, "reduce_scatter_sum with add, longest " + std::to_string(longest));
  }
}

// all_gather_v: block j of recv is bitwise rank j's send, also in place; (P−1)·counts[rank] bytes sent.
inline void check_all_gather_v(Communicator& comm, uint64_t seed) {
  SCOPED_TRACE(where(comm));
  const int ranks = comm.size(), me = comm.rank();
  for (size_t longest : {size_t{0}, size_t{7}, size_t{40000}}) {
    const std::vector<size_t> counts = v_blocks(seed + longest, ranks, longest);
    std::vector<float> want;
    size_t my_begin = 0;
    for (int j = 0; j < ranks; ++j) {
      if (j == me) my_begin = want.size();
      const std::vector<float> theirs = rank_values<float>(seed, j, 800 + longest, counts[j]);
      want.insert(want.end(), theirs.begin(), theirs.end());
    }
    const std::vector<float> mine = rank_values<float>(seed, me, 800 + longest, counts[me]);
    std::vector<float> recv(want.size(), -1.0f), in_place(want.size(), -2.0f);
    std::vector<size_t> bytes;
    for (size_t count : counts) bytes.push_back(count * sizeof(float));
    comm.reset_bytes_sent();
    comm.all_gather_v(mine.data(), recv.data(), bytes.data());
    EXPECT_EQ(comm.bytes_sent(), static_cast<uint64_t>(ranks - 1) * bytes[me]);
    expect_bitwise_equal(recv, want, "all_gather_v, longest " + std::to_string(longest));
    std::copy(mine.begin(), mine.end(), in_place.begin() + static_cast<std::ptrdiff_t>(my_begin));
    comm.all_gather_v(in_place.data() + my_begin, in_place.data(), bytes.data());
    expect_bitwise_equal(in_place, want, "in-place all_gather_v, longest " + std::to_string(longest));
  }
}

// broadcast from every root: every rank ends with the root's bytes; the root counts (P−1)·bytes.
inline void check_broadcast(Communicator& comm, uint64_t seed) {
  SCOPED_TRACE(where(comm));
  const int ranks = comm.size(), me = comm.rank();
  for (int root = 0; root < ranks; ++root) {
    const size_t count = 1001;
    const std::vector<float> roots = rank_values<float>(seed, root, 400, count);
    std::vector<float> data = me == root ? roots : std::vector<float>(count, 7.0f);
    comm.reset_bytes_sent();
    comm.broadcast(data.data(), count * sizeof(float), root);
    expect_bitwise_equal(data, roots, "broadcast from root " + std::to_string(root));
    EXPECT_EQ(comm.bytes_sent(), me == root ? static_cast<uint64_t>(ranks - 1) * count * sizeof(float) : 0u);
  }
}

// DP × SP: for every factorisation P = dp·sp, SP groups are consecutive world ranks
// (color = rank / sp), DP groups strided (color = rank % sp). An all-to-all inside each SP group
// and an all-reduce inside each DP group give what the group's members alone would; a split by
// descending key reverses the order.
inline void check_split(Communicator& comm, uint64_t seed) {
  SCOPED_TRACE(where(comm));
  const int ranks = comm.size(), me = comm.rank();
  for (int sp = 1; sp <= ranks; ++sp) {
    if (ranks % sp != 0) continue;
    const int dp = ranks / sp;
    SCOPED_TRACE("dp " + std::to_string(dp) + " x sp " + std::to_string(sp));
    std::unique_ptr<Communicator> sp_group = comm.split(me / sp, me);
    std::unique_ptr<Communicator> dp_group = comm.split(me % sp, me);
    EXPECT_EQ(sp_group->size(), sp);
    EXPECT_EQ(sp_group->rank(), me % sp);
    EXPECT_EQ(dp_group->size(), dp);
    EXPECT_EQ(dp_group->rank(), me / sp);
    EXPECT_EQ(sp_group->backend(), comm.backend());

    const size_t count = 33;
    const uint64_t salt = 500 + static_cast<uint64_t>(sp);
    const std::vector<float> send = rank_values<float>(seed, me, salt, sp * count);  // (sp, count)
    std::vector<float> recv(sp * count);
    sp_group->all_to_all(send.data(), recv.data(), count);
    for (int j = 0; j < sp; ++j) {
      const int world_j = (me / sp) * sp + j;
      const std::vector<float> theirs = rank_values<float>(seed, world_j, salt, sp * count);
      expect_bitwise_equal(recv.data() + j * count, theirs.data() + (me % sp) * count, count * sizeof(float),
                           "SP all_to_all block from world rank " + std::to_string(world_j));
    }
    EXPECT_EQ(sp_group->bytes_sent(), static_cast<uint64_t>(sp - 1) * count * sizeof(float));

    const size_t n = 257;
    std::vector<double> data = rank_values<double>(seed, me, salt + 1, n);
    std::vector<double> want = rank_values<double>(seed, me % sp, salt + 1, n);
    for (int d = 1; d < dp; ++d) {
      const std::vector<double> x = rank_values<double>(seed, d * sp + me % sp, salt + 1, n);
      for (size_t i = 0; i < n; ++i) want[i] += x[i];
    }
    dp_group->all_reduce_sum(data.data(), n);
    expect_bitwise_equal(data, want, "DP all_reduce_sum");
    EXPECT_EQ(comm.bytes_sent(), 0u) << "sub-groups count their own bytes";

    std::unique_ptr<Communicator> reversed = comm.split(0, -me);
    EXPECT_EQ(reversed->rank(), ranks - 1 - me);
    std::vector<int> world_ranks(ranks);  // (P) by reversed rank
    reversed->all_gather(&me, world_ranks.data(), sizeof(int));
    for (int j = 0; j < ranks; ++j) EXPECT_EQ(world_ranks[j], ranks - 1 - j);
    comm.barrier();
  }
}

// Every check above, in one order that every rank follows.
inline void check_all_collectives(Communicator& comm, uint64_t seed) {
  comm.reset_bytes_sent();
  check_all_to_all(comm, seed);
  check_all_to_all_v(comm, seed);
  check_all_reduce_sum<float>(comm, seed);
  check_all_reduce_sum<double>(comm, seed);
  check_all_gather(comm, seed);
  check_reduce_scatter_sum(comm, seed);
  check_all_gather_v(comm, seed);
  check_broadcast(comm, seed);
  comm.reset_bytes_sent();
  check_split(comm, seed);
  comm.barrier();
}

// Shrinks the message and all-reduce piece sizes (odd, so floats straddle messages) for the
// lifetime of the object, so the piece loops run on small arrays. Set on every rank alike.
struct SmallPieces {
  SmallPieces() { set_limits(Limits{1001, 4 * 97}); }
  ~SmallPieces() { set_limits(default_limits()); }
};

}  // namespace fpdt::comm::testing

// What every backend shares: argument checks, byte counting, the deterministic all-reduce
// (reduce-scatter + all-gather over exchange_bytes, summing in rank order) and the limits.
#include "fpdt/comm/communicator.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/comm/text.h"

namespace fpdt::comm {

namespace {

std::atomic<size_t> g_message_bytes{static_cast<size_t>(INT_MAX)};
std::atomic<size_t> g_reduce_piece_bytes{size_t{64} << 20};
std::atomic<double> g_deadline_seconds{kDefaultDeadlineSeconds};

// The four per-rank arrays of an exchange_bytes call, in one allocation.
struct Exchange {
  explicit Exchange(size_t ranks)
      : arrays(4 * ranks),
        send_counts(arrays.data()),
        send_displs(send_counts + ranks),
        recv_counts(send_displs + ranks),
        recv_displs(recv_counts + ranks) {}
  std::vector<size_t> arrays;
  size_t* send_counts;
  size_t* send_displs;
  size_t* recv_counts;
  size_t* recv_displs;
};

void check_root(int root, int size) {
  if (root >= 0 && root < size) return;
  std::string message = "broadcast root ";
  message.append(std::to_string(root)).append(" is not a rank of a group of ").append(std::to_string(size));
  throw Error("comm", message);
}

}  // namespace

Limits default_limits() { return Limits{static_cast<size_t>(INT_MAX), size_t{64} << 20}; }

Limits limits() { return Limits{g_message_bytes.load(), g_reduce_piece_bytes.load()}; }

void set_limits(const Limits& limits) {
  FPDT_CHECK(limits.message_bytes > 0 && limits.message_bytes <= static_cast<size_t>(INT_MAX), "comm",
             "message_bytes must be in [1, INT_MAX]", "");
  FPDT_CHECK(limits.reduce_piece_bytes >= sizeof(double), "comm", "reduce_piece_bytes must hold one double", "");
  g_message_bytes.store(limits.message_bytes);
  g_reduce_piece_bytes.store(limits.reduce_piece_bytes);
}

double deadline_seconds() { return g_deadline_seconds.load(); }

void set_deadline_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  FPDT_CHECK(std::isfinite(seconds) && seconds > 0, "comm",
             detail::cat("the collective deadline must be a positive number of seconds, got ", text),
             "e.g. 600 (ten minutes)");
  g_deadline_seconds.store(seconds);
}

double heartbeat_seconds() { return std::min(1.0, deadline_seconds() / 10); }

std::shared_ptr<void> Communicator::scratch(size_t bytes) {
  return std::shared_ptr<void>(::operator new(std::max<size_t>(bytes, 1)),
                               [](void* memory) { ::operator delete(memory); });
}

namespace {

template <typename T>
void sum_blocks_on_host(T* dst, const T* blocks, size_t ranks, size_t n, bool add) {
  for (size_t i = 0; i < n; ++i) {
    T sum = blocks[i];
    for (size_t j = 1; j < ranks; ++j) sum += blocks[j * n + i];
    dst[i] = add ? dst[i] + sum : sum;
  }
}

}  // namespace

void Communicator::sum_blocks(float* dst, const float* blocks, size_t ranks, size_t n, bool add) {
  sum_blocks_on_host(dst, blocks, ranks, n, add);
}
void Communicator::sum_blocks(double* dst, const double* blocks, size_t ranks, size_t n, bool add) {
  sum_blocks_on_host(dst, blocks, ranks, n, add);
}
void Communicator::copy_bytes(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

void Communicator::exchange_equal_bytes(const void* send, void* recv, size_t block_bytes) {
  const size_t ranks = static_cast<size_t>(size());
  std::vector<size_t> counts(ranks, block_bytes), displs(ranks);
  for (size_t j = 0; j < ranks; ++j) displs[j] = j * block_bytes;
  exchange_bytes(send, counts.data(), displs.data(), recv, counts.data(), displs.data());
}

void Communicator::all_to_all(const float* send, float* recv, size_t count) {
  const size_t ranks = static_cast<size_t>(size());
  FPDT_CHECK(count == 0 || (send != nullptr && recv != nullptr), "comm", "all_to_all: null buffer", "");
  const uintptr_t send_at = reinterpret_cast<uintptr_t>(send), recv_at = reinterpret_cast<uintptr_t>(recv);
  const size_t buffer_bytes = ranks * count * sizeof(float);
  FPDT_CHECK(count == 0 || send_at + buffer_bytes <= recv_at || recv_at + buffer_bytes <= send_at, "comm",
             "all_to_all: send and recv overlap", "use two buffers");
  exchange_equal_bytes(send, recv, count * sizeof(float));
  add_bytes_sent((ranks - 1) * count * sizeof(float));
}

void Communicator::all_to_all_v(const float* send, const size_t* send_counts, const size_t* send_displs,
                                float* recv, const size_t* recv_counts, const size_t* recv_displs) {
  const size_t ranks = static_cast<size_t>(size());
  FPDT_CHECK(send_counts && send_displs && recv_counts && recv_displs, "comm",
             "all_to_all_v: null count or displacement array", "");
  check_exchange_counts(send_counts, recv_counts);
  Exchange bytes(ranks);
  size_t* send_count_bytes = bytes.send_counts;
  size_t* send_displ_bytes = bytes.send_displs;
  size_t* recv_count_bytes = bytes.recv_counts;
  size_t* recv_displ_bytes = bytes.recv_displs;
  uint64_t sent = 0;
  for (size_t j = 0; j < ranks; ++j) {
    send_count_bytes[j] = send_counts[j] * sizeof(float);
    send_displ_bytes[j] = send_displs[j] * sizeof(float);
    recv_count_bytes[j] = recv_counts[j] * sizeof(float);
    recv_displ_bytes[j] = recv_displs[j] * sizeof(float);
    if (j != static_cast<size_t>(rank())) sent += send_count_bytes[j];
  }
  exchange_bytes(send, send_count_bytes, send_displ_bytes, recv, recv_count_bytes, recv_displ_bytes);
  add_bytes_sent(sent);
}

void Communicator::all_reduce_sum(float* data, size_t count) { all_reduce_sum_impl(data, count); }
void Communicator::all_reduce_sum(double* data, size_t count) { all_reduce_sum_impl(data, count); }

// Per piece of n elements, rank r owns the segment [r·n/P, (r+1)·n/P). Reduce-scatter: every rank
// sends segment j to rank j; rank r sums the P copies of its segment in rank order 0..P−1.
// All-gather: every rank sends its summed segment to all. Scratch: P·⌈n/P⌉ + ⌈n/P⌉ elements.
template <typename T>
void Communicator::all_reduce_sum_impl(T* data, size_t count) {
  const size_t ranks = static_cast<size_t>(size());
  const size_t me = static_cast<size_t>(rank());
  if (ranks == 1 || count == 0) return;
  FPDT_CHECK(data != nullptr, "comm", "all_reduce_sum: null buffer", "");
  const size_t piece_max = std::max<size_t>(1, limits().reduce_piece_bytes / sizeof(T));
  const size_t segment_max = (std::min(count, piece_max) + ranks - 1) / ranks;
  const std::shared_ptr<void> memory = scratch((ranks + 1) * segment_max * sizeof(T));
  T* received = static_cast<T*>(memory.get());  // (P, segment)
  T* summed = received + ranks * segment_max;   // (segment)
  Exchange exchange(ranks);
  size_t* send_counts = exchange.send_counts;
  size_t* send_displs = exchange.send_displs;
  size_t* recv_counts = exchange.recv_counts;
  size_t* recv_displs = exchange.recv_displs;

  for (size_t begin = 0; begin < count; begin += piece_max) {
    const size_t n = std::min(piece_max, count - begin);
    auto segment_begin = [&](size_t j) { return j * n / ranks; };
    const size_t my_begin = segment_begin(me);
    const size_t my_len = segment_begin(me + 1) - my_begin;
    T* piece = data + begin;

    uint64_t sent = 0;
    for (size_t j = 0; j < ranks; ++j) {
      send_counts[j] = (segment_begin(j + 1) - segment_begin(j)) * sizeof(T);
      send_displs[j] = segment_begin(j) * sizeof(T);
      recv_counts[j] = my_len * sizeof(T);
      recv_displs[j] = j * my_len * sizeof(T);
      if (j != me) sent += send_counts[j];
    }
    exchange_bytes(piece, send_counts, send_displs, received, recv_counts, recv_displs);
    add_bytes_sent(sent);
    sum_blocks(summed, received, ranks, my_len, false);

    for (size_t j = 0; j < ranks; ++j) {
      send_counts[j] = my_len * sizeof(T);
      send_displs[j] = 0;
      recv_counts[j] = (segment_begin(j + 1) - segment_begin(j)) * sizeof(T);
      recv_displs[j] = segment_begin(j) * sizeof(T);
    }
    exchange_bytes(summed, send_counts, send_displs, piece, recv_counts, recv_displs);
    add_bytes_sent((ranks - 1) * my_len * sizeof(T));
  }
}

// In rounds of q = piece / P elements of every block (the same number of rounds on every rank: the
// longest block's), so the scratch is P·q elements whatever the blocks' sizes. Round k sends elements
// [k·q, (k+1)·q) of block j to rank j; this rank sums the P pieces it receives in rank order. Round k
// writes recv only where the rounds after it no longer read (in place is safe).
void Communicator::reduce_scatter_sum(const float* send, float* recv, const size_t* counts, bool add) {
  const size_t ranks = static_cast<size_t>(size());
  const size_t me = static_cast<size_t>(rank());
  FPDT_CHECK(counts != nullptr, "comm", "reduce_scatter_sum: null counts", "");
  std::vector<size_t> begin(ranks + 1, 0);  // block j at [begin[j], begin[j + 1])
  for (size_t j = 0; j < ranks; ++j) begin[j + 1] = begin[j] + counts[j];
  FPDT_CHECK(begin[ranks] == 0 || (send != nullptr && (counts[me] == 0 || recv != nullptr)), "comm",
             "reduce_scatter_sum: null buffer", "");
  const uintptr_t recv_at = reinterpret_cast<uintptr_t>(recv), own_at = reinterpret_cast<uintptr_t>(send + begin[me]);
  FPDT_CHECK(!add || counts[me] == 0 || recv_at + counts[me] * sizeof(float) <= own_at ||
                 recv_at >= own_at + counts[me] * sizeof(float),
             "comm", "reduce_scatter_sum: adding into this rank's own block of send", "reduce into another buffer");
  const size_t longest = *std::max_element(counts, counts + ranks);
  const size_t piece = std::max<size_t>(1, limits().reduce_piece_bytes / sizeof(float) / ranks);
  const std::shared_ptr<void> memory = scratch(ranks * std::min(piece, counts[me]) * sizeof(float));
  float* received = static_cast<float*>(memory.get());  // (P, piece)
  Exchange x(ranks);
  uint64_t sent = 0;
  for (size_t done = 0; done < longest; done += piece) {
    const size_t mine = counts[me] > done ? std::min(piece, counts[me] - done) : 0;
    for (size_t j = 0; j < ranks; ++j) {
      x.send_counts[j] = (counts[j] > done ? std::min(piece, counts[j] - done) : 0) * sizeof(float);
      x.send_displs[j] = (begin[j] + std::min(done, counts[j])) * sizeof(float);
      x.recv_counts[j] = mine * sizeof(float);
      x.recv_displs[j] = j * mine * sizeof(float);
      if (j != me) sent += x.send_counts[j];
    }
    exchange_bytes(send, x.send_counts, x.send_displs, received, x.recv_counts, x.recv_displs);
    if (mine > 0) sum_blocks(recv + done, received, ranks, mine, add);
  }
  add_bytes_sent(sent);
}

void Communicator::all_gather_v(const void* send, void* recv, const size_t* counts) {
  const size_t ranks = static_cast<size_t>(size());
  const size_t me = static_cast<size_t>(rank());
  FPDT_CHECK(counts != nullptr, "comm", "all_gather_v: null counts", "");
  Exchange x(ranks);
  size_t total = 0;
  for (size_t j = 0; j < ranks; ++j) {
    // The own block is copied here, not exchanged: in place it is already where it belongs.
    x.send_counts[j] = j == me ? 0 : counts[me];
    x.send_displs[j] = 0;
    x.recv_counts[j] = j == me ? 0 : counts[j];
    x.recv_displs[j] = total;
    total += counts[j];
  }
  FPDT_CHECK(total == 0 || (recv != nullptr && (counts[me] == 0 || send != nullptr)), "comm",
             "all_gather_v: null buffer", "");
  exchange_bytes(send, x.send_counts, x.send_displs, recv, x.recv_counts, x.recv_displs);
  char* own = static_cast<char*>(recv) + x.recv_displs[me];
  if (counts[me] > 0 && own != send) copy_bytes(own, send, counts[me]);
  add_bytes_sent(static_cast<uint64_t>(ranks - 1) * counts[me]);
}

void Communicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  FPDT_CHECK(bytes_per_rank == 0 || (send != nullptr && recv != nullptr), "comm", "all_gather: null buffer", "");
  gather_bytes(send, recv, bytes_per_rank);
  add_bytes_sent(static_cast<uint64_t>(size() - 1) * bytes_per_rank);
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  check_root(root, size());
  FPDT_CHECK(bytes == 0 || data != nullptr, "comm", "broadcast: null buffer", "");
  broadcast_bytes(data, bytes, root);
  if (rank() == root) add_bytes_sent(static_cast<uint64_t>(size() - 1) * bytes);
}

}  // namespace fpdt::comm

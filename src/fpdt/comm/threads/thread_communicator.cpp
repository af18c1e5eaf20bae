// Threads backend (see thread_communicator.h). Protocol of every collective: each rank publishes
// its arguments in its slot, waits for the group, copies what it receives out of the peers'
// buffers, waits again (so no buffer is reused while a peer still reads it, even when the run has
// failed meanwhile: that second wait is wait_all_read). All groups of one run share a mutex and
// condition variable, so a failure wakes every waiting rank at once.
#include "fpdt/comm/threads/thread_communicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/comm/text.h"

namespace fpdt::comm {

namespace {

// State of one run_ranks call, shared by every group split from it.
struct Run {
  std::mutex mutex;
  std::condition_variable changed;
  bool failed = false;
  int failed_rank = -1;
  std::string failure;
  std::vector<char> returned;  // (P) by world rank: the body returned normally

  explicit Run(int ranks) : returned(static_cast<size_t>(ranks), 0) {}

  Error failure_error() const { return Error("comm", detail::cat("rank ", failed_rank, " failed: ", failure)); }

  void record_failure(int world_rank, const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex);
    record_failure_locked(world_rank, message);
  }
  void record_failure_locked(int world_rank, const std::string& message) {
    if (!failed) {
      failed = true;
      failed_rank = world_rank;
      failure = message;
    }
    changed.notify_all();
  }
};

struct Group;

// One rank's published arguments for the collective in progress.
struct Slot {
  const void* send = nullptr;
  const size_t* send_counts = nullptr;
  const size_t* send_displs = nullptr;
  size_t bytes = 0;
  int color = 0;
  int key = 0;
  std::shared_ptr<Group> new_group;  // split: set by the new group's first member
};

struct Group {
  std::shared_ptr<Run> run;
  std::vector<int> world_ranks;  // (group size) world rank of each group rank
  std::vector<Slot> slots;       // (group size)
  std::vector<char> present;     // (group size) arrived in the collective in progress
  int arrived = 0;
  uint64_t generation = 0;

  Group(std::shared_ptr<Run> run_in, std::vector<int> world_ranks_in)
      : run(std::move(run_in)),
        world_ranks(std::move(world_ranks_in)),
        slots(world_ranks.size()),
        present(world_ranks.size(), 0) {}
  int size() const { return static_cast<int>(world_ranks.size()); }

  // World rank of a member that already returned (so this group's barrier cannot complete), or -1.
  int returned_member() const {
    for (int world_rank : world_ranks)
      if (run->returned[static_cast<size_t>(world_rank)]) return world_rank;
    return -1;
  }

  // Counts this member in; true when it is the last, which completes the barrier.
  bool arrive(int group_rank) {
    if (++arrived == size()) {
      arrived = 0;
      ++generation;
      std::fill(present.begin(), present.end(), 0);
      run->changed.notify_all();
      return true;
    }
    present[static_cast<size_t>(group_rank)] = 1;
    return false;
  }

  // The barrier after a collective's copies out of peers' buffers: every member passed the barrier
  // before and is only copying, so all arrive. It waits for them even when the run has failed, so a
  // rank woken by the failure cannot free buffers a peer is still reading. Never throws.
  void wait_all_read(int group_rank) {
    std::unique_lock<std::mutex> lock(run->mutex);
    const uint64_t my_generation = generation;
    if (arrive(group_rank)) return;
    run->changed.wait(lock, [&] { return generation != my_generation; });
  }

  // Waits until every member arrived; throws when the run failed, can no longer complete, or the
  // members missing have not arrived within the deadline (deadline_seconds()).
  void wait_all(int group_rank) {
    const int world_rank = world_ranks[static_cast<size_t>(group_rank)];
    std::unique_lock<std::mutex> lock(run->mutex);
    if (run->failed) throw run->failure_error();
    const uint64_t my_generation = generation;
    if (arrive(group_rank)) return;
    const double deadline = deadline_seconds();
    const bool woken = run->changed.wait_for(lock, std::chrono::duration<double>(deadline), [&] {
      return generation != my_generation || run->failed || returned_member() >= 0;
    });
    if (generation != my_generation) return;
    if (run->failed) throw run->failure_error();
    if (!woken) {
      std::string missing;
      int first_missing = -1;
      for (int j = 0; j < size(); ++j) {
        if (present[static_cast<size_t>(j)]) continue;
        const int member = world_ranks[static_cast<size_t>(j)];
        missing.append(missing.empty() ? "" : ", ").append(std::to_string(member));
        if (first_missing < 0) first_missing = member;
      }
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", deadline);
      run->record_failure_locked(first_missing,
                                 detail::cat("did not reach a collective within the ", seconds,
                                             " s deadline (rank ", world_rank, " waited; ranks missing: ", missing, ")"));
      throw run->failure_error();
    }
    throw Error("comm",
                detail::cat("rank ", returned_member(), " returned while rank ", world_rank,
                            " waits for it in a collective"),
                "every rank of a group must call the same collectives in the same order");
  }
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank), world_rank_(group_->world_ranks[static_cast<size_t>(rank)]) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string backend() const override { return "threads"; }

  void barrier() override { group_->wait_all(rank_); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    FPDT_CHECK(color >= 0, "comm", "split: color must be >= 0", "");
    Slot& mine = my_slot();
    mine.color = color;
    mine.key = key;
    group_->wait_all(rank_);
    std::vector<int> members;  // group ranks with my color, ordered by (key, rank)
    for (int j = 0; j < size(); ++j)
      if (slot(j).color == color) members.push_back(j);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return slot(a).key < slot(b).key; });
    if (members.front() == rank_) {
      std::vector<int> world_ranks;
      for (int member : members) world_ranks.push_back(group_->world_ranks[static_cast<size_t>(member)]);
      mine.new_group = std::make_shared<Group>(group_->run, std::move(world_ranks));
    }
    group_->wait_all(rank_);
    std::shared_ptr<Group> new_group = slot(members.front()).new_group;
    const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    group_->wait_all_read(rank_);
    mine.new_group.reset();
    return std::make_unique<ThreadCommunicator>(std::move(new_group), new_rank);
  }

  [[noreturn]] void abort(const std::string& reason) override {
    std::fprintf(stderr, "rank %d: %s\n", world_rank_, reason.c_str());
    std::fflush(stderr);
    group_->run->record_failure(world_rank_, reason);
    throw Error("comm", detail::cat("rank ", world_rank_, " aborted: ", reason));
  }

 protected:
  void exchange_bytes(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                      const size_t* recv_counts, const size_t* recv_displs) override {
    Slot& mine = my_slot();
    mine.send = send;
    mine.send_counts = send_counts;
    mine.send_displs = send_displs;
    group_->wait_all(rank_);
    std::optional<Error> mismatch;
    const size_t me = static_cast<size_t>(rank_);
    for (int j = 0; j < size(); ++j) {
      const Slot& from = slot(j);
      const size_t bytes = from.send_counts[me];
      if (bytes != recv_counts[j]) {
        if (!mismatch) mismatch = detail::count_mismatch(j, rank_, bytes, recv_counts[j], "bytes");
        continue;
      }
      if (bytes == 0) continue;
      std::memcpy(static_cast<char*>(recv) + recv_displs[j],
                  static_cast<const char*>(from.send) + from.send_displs[me], bytes);
    }
    group_->wait_all_read(rank_);  // the group stays in step even when this rank throws below
    if (mismatch) throw *mismatch;
  }

  void gather_bytes(const void* send, void* recv, size_t bytes_per_rank) override {
    Slot& mine = my_slot();
    mine.send = send;
    mine.bytes = bytes_per_rank;
    group_->wait_all(rank_);
    std::optional<Error> mismatch;
    for (int j = 0; j < size(); ++j) {
      const Slot& from = slot(j);
      if (from.bytes != bytes_per_rank) {
        if (!mismatch)
          mismatch = Error("comm", detail::cat("all_gather: rank ", j, " gathers ", from.bytes, " bytes per rank, rank ",
                                               rank_, " ", bytes_per_rank));
        continue;
      }
      char* to = static_cast<char*>(recv) + static_cast<size_t>(j) * bytes_per_rank;
      if (bytes_per_rank > 0 && to != from.send) std::memcpy(to, from.send, bytes_per_rank);
    }
    group_->wait_all_read(rank_);
    if (mismatch) throw *mismatch;
  }

  void broadcast_bytes(void* data, size_t bytes, int root) override {
    Slot& mine = my_slot();
    mine.send = data;
    mine.bytes = bytes;
    mine.color = root;
    group_->wait_all(rank_);
    const Slot& from = slot(root);
    std::optional<Error> mismatch;
    if (from.bytes != bytes || from.color != root)
      mismatch = Error("comm", detail::cat("broadcast: rank ", rank_, " expects ", bytes, " bytes from root ", root,
                                           " but rank ", root, " sends ", from.bytes));
    else if (rank_ != root && bytes > 0)
      std::memcpy(data, from.send, bytes);
    group_->wait_all_read(rank_);
    if (mismatch) throw *mismatch;
  }

 private:
  Slot& my_slot() { return group_->slots[static_cast<size_t>(rank_)]; }
  const Slot& slot(int j) const { return group_->slots[static_cast<size_t>(j)]; }

  std::shared_ptr<Group> group_;
  int rank_;
  int world_rank_;
};

}  // namespace

void run_ranks(int ranks, const std::function<void(Communicator&)>& body) {
  FPDT_CHECK(ranks >= 1, "comm", detail::cat("run_ranks: ", ranks, " ranks"), "use at least one rank");
  auto run = std::make_shared<Run>(ranks);
  std::vector<int> world_ranks(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) world_ranks[static_cast<size_t>(r)] = r;
  auto world = std::make_shared<Group>(run, std::move(world_ranks));

  auto rank_main = [&](int r) {
    try {
      ThreadCommunicator comm(world, r);
      body(comm);
      std::lock_guard<std::mutex> lock(run->mutex);
      run->returned[static_cast<size_t>(r)] = 1;
      run->changed.notify_all();
    } catch (const std::exception& error) {
      run->record_failure(r, error.what());
    } catch (...) {
      run->record_failure(r, "unknown exception");
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    try {
      threads.emplace_back(rank_main, r);
    } catch (const std::exception& error) {  // e.g. out of threads: fail the group, join the others
      run->record_failure(r, detail::cat("cannot start its thread: ", error.what()));
      break;
    }
  }
  for (std::thread& thread : threads) thread.join();
  if (run->failed) throw run->failure_error();
}

}  // namespace fpdt::comm

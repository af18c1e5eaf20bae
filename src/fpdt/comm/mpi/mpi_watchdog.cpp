// The heartbeat thread (see mpi_watchdog.h). Ring: rank r beats to r − 1 and watches r + 1 (mod P),
// so every rank has exactly one watcher and heartbeat traffic is P messages a period, whatever P.
// A beat is one 8-byte message; MPI keeps messages between two ranks with one tag in order, so the
// goodbye arrives after every beat before it and draining ends exactly at it.
#include "fpdt/comm/mpi/mpi_watchdog.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fpdt/comm/communicator.h"

namespace fpdt::comm::mpi {

namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

constexpr int kHeartbeatTag = 7002;
constexpr uint64_t kBeat = 0;
constexpr uint64_t kGoodbye = 1;
constexpr double kTickSeconds = 0.1;  // how often the thread looks, at most

std::string mpi_error_text(int status) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(status);
  return std::string(text, static_cast<size_t>(length));
}

class Watchdog {
 public:
  explicit Watchdog(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    watcher_ = (rank_ + size_ - 1) % size_;
    watched_ = (rank_ + 1) % size_;
    thread_ = std::thread([this] { run(); });
  }

  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
    MPI_Comm_free(&comm_);
  }

 private:
  // An MPI call of this thread failed: nothing can be trusted any more, end the job.
  void check(int status, const char* what) const {
    if (status != MPI_SUCCESS)
      abort_job(std::string("[comm] the liveness watchdog's ") + what + " failed: " + mpi_error_text(status));
  }

  void send(const uint64_t* value) {
    sends_.emplace_back();
    check(MPI_Isend(value, 1, MPI_UINT64_T, watcher_, kHeartbeatTag, comm_, &sends_.back()), "MPI_Isend");
  }

  void run() {
    uint64_t incoming = 0;
    MPI_Request receive = MPI_REQUEST_NULL;
    check(MPI_Irecv(&incoming, 1, MPI_UINT64_T, watched_, kHeartbeatTag, comm_, &receive), "MPI_Irecv");
    Clock::time_point last_heard = Clock::now(), last_look = last_heard, next_beat = last_heard;
    bool said_goodbye = false, heard_goodbye = false;
    for (;;) {
      const Clock::time_point now = Clock::now();
      const double heartbeat = heartbeat_seconds(), deadline = deadline_seconds();
      // Time this thread did not run (the process was stopped or starved) is no peer's silence.
      const Seconds late = now - last_look - Seconds(std::min(kTickSeconds, heartbeat));
      if (late > Seconds(heartbeat)) last_heard += std::chrono::duration_cast<Clock::duration>(late);
      last_look = now;

      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping = stopping_;
      }
      if (stopping && !said_goodbye) {
        send(&kGoodbye);
        said_goodbye = true;
      } else if (!said_goodbye && now >= next_beat) {
        send(&kBeat);
        next_beat = now + std::chrono::duration_cast<Clock::duration>(Seconds(heartbeat));
      }
      sends_.erase(std::remove_if(sends_.begin(), sends_.end(),
                                  [&](MPI_Request& request) {
                                    int done = 0;
                                    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
                                    return done != 0;
                                  }),
                   sends_.end());
      while (!heard_goodbye) {
        int done = 0;
        check(MPI_Test(&receive, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (!done) break;
        last_heard = now;
        if (incoming == kGoodbye) {
          heard_goodbye = true;
        } else {
          check(MPI_Irecv(&incoming, 1, MPI_UINT64_T, watched_, kHeartbeatTag, comm_, &receive), "MPI_Irecv");
        }
      }
      if (said_goodbye && heard_goodbye && sends_.empty()) return;
      const double silent = Seconds(now - last_heard).count();
      if (!heard_goodbye && silent > deadline) {
        char reason[320];
        std::snprintf(reason, sizeof reason,
                      "[comm] rank %d sent no heartbeat for %.1f s (deadline %g s): it is stopped, hung or cut "
                      "off; hint: look at rank %d's host; a longer deadline is --comm-timeout",
                      watched_, silent, deadline, watched_);
        abort_job(reason);
      }
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, Seconds(std::min(kTickSeconds, heartbeat)), [&] { return stopping_ && !said_goodbye; });
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, watcher_ = 0, watched_ = 0;
  std::vector<MPI_Request> sends_;  // beats not yet known to be sent (touched by the thread only)
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

std::unique_ptr<Watchdog> g_watchdog;

}  // namespace

void start_watchdog(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  if (size == 1) {
    MPI_Comm_free(&comm);
    return;
  }
  g_watchdog = std::make_unique<Watchdog>(comm);
}

void stop_watchdog() { g_watchdog.reset(); }

}  // namespace fpdt::comm::mpi

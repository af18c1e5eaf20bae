// One worker thread that runs submitted tasks in submission order, and events to wait for them (never
// sleeps or polls): the host copy engine (kernels/copy_engine.cpp), ZeRO's queue of collectives
// (pipeline/zero_collectives.h) and the offloaded optimizer's thread (pipeline/zero_optimizer.h) are
// one each. A task that throws fails the queue: its exception is rethrown by every later wait.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace fpdt {

class WorkQueue {
 public:
  // Task n (from 1) is event n; event 0 has always happened.
  using Event = uint64_t;

  WorkQueue();
  // on_start runs first on the worker thread, before any task: what a thread must do before it computes
  // (DeviceMemory::bind_thread — a CUDA thread starts on GPU 0, not the backend's). If it throws, the queue
  // has failed: every wait rethrows it, and no task runs.
  explicit WorkQueue(std::function<void()> on_start);
  // Runs what is queued first, so no task is left reading freed memory; never throws.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  Event submit(std::function<void()> task);
  // Until `event` and every task before it have run; rethrows the first failure.
  void wait(Event event);
  void wait_all();

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<std::function<void()>> queue_;
  Event submitted_ = 0;
  Event completed_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::function<void()> on_start_;
  std::thread worker_;  // last: started after everything it reads is constructed
};

}  // namespace fpdt

// The in-order worker thread (see work_queue.h).
#include "fpdt/base/work_queue.h"

#include <utility>

namespace fpdt {

WorkQueue::WorkQueue() : worker_([this] { run(); }) {}

WorkQueue::WorkQueue(std::function<void()> on_start) : on_start_(std::move(on_start)), worker_([this] { run(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  worker_.join();
}

WorkQueue::Event WorkQueue::submit(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(std::move(task));
  work_ready_.notify_one();
  return ++submitted_;
}

void WorkQueue::wait(Event event) {
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [&] { return completed_ >= event || error_ != nullptr; });
  if (error_ != nullptr) std::rethrow_exception(error_);
}

void WorkQueue::wait_all() {
  Event last;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last = submitted_;
  }
  wait(last);
}

void WorkQueue::run() {
  std::exception_ptr start_failure;
  if (on_start_) {
    try {
      on_start_();
    } catch (...) {
      start_failure = std::current_exception();
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (start_failure != nullptr) {  // every wait rethrows it
    error_ = start_failure;
    work_done_.notify_all();
  }
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping with nothing left
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr failure;
    if (start_failure == nullptr) {  // a thread that could not start runs nothing
      try {
        task();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    lock.lock();
    if (failure != nullptr && error_ == nullptr) error_ = failure;
    ++completed_;
    work_done_.notify_all();
  }
}

}  // namespace fpdt

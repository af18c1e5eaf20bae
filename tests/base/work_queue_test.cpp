// WorkQueue's start hook (base/work_queue.h): it runs on the worker thread, before any task — where ZeRO's
// queues make their thread compute on the backend's device (DeviceMemory::bind_thread: cudaSetDevice on the
// CUDA backend, whose threads otherwise start on GPU 0) — and a hook that throws fails the queue: no task
// runs and every wait rethrows it.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fpdt/base/work_queue.h"

namespace fpdt {
namespace {

TEST(WorkQueue, StartHookRunsOnTheWorkerBeforeAnyTask) {
  std::thread::id hook_thread;
  std::vector<std::thread::id> task_threads;
  std::vector<int> order;  // written only by the worker
  {
    WorkQueue queue([&] {
      hook_thread = std::this_thread::get_id();
      order.push_back(0);
    });
    for (int task = 1; task <= 3; ++task)
      queue.submit([&, task] {
        task_threads.push_back(std::this_thread::get_id());
        order.push_back(task);
      });
    queue.wait_all();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(hook_thread, std::this_thread::get_id());
  for (const std::thread::id id : task_threads) EXPECT_EQ(id, hook_thread);
}

TEST(WorkQueue, AFailedStartFailsEveryWaitAndRunsNothing) {
  std::atomic<int> ran{0};
  WorkQueue queue([] { throw std::runtime_error("no device for this thread"); });
  const WorkQueue::Event event = queue.submit([&] { ++ran; });
  try {
    queue.wait(event);
    ADD_FAILURE() << "the start hook's failure was not rethrown";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "no device for this thread");
  }
  EXPECT_THROW(queue.wait_all(), std::runtime_error);
  EXPECT_EQ(ran.load(), 0);
}

}  // namespace
}  // namespace fpdt

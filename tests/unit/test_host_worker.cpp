// HostWorker (engine/offload/host_worker.h): tasks run in submission order on one thread other
// than the caller's; wait_idle() waits for them and rethrows the first error once, the tasks
// queued or submitted after it dropped until then; the destructor runs what is queued.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/offload/host_worker.h"

namespace zt {
namespace {

TEST(HostWorker, RunsTasksInOrderOnItsOwnThread) {
  std::vector<int> order;
  std::thread::id ran_on;
  {
    HostWorker worker;
    for (int i = 0; i < 50; ++i) worker.submit([&order, i] { order.push_back(i); });
    worker.submit([&ran_on] { ran_on = std::this_thread::get_id(); });
    worker.wait_idle();
    ASSERT_EQ(order.size(), 50u);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
    EXPECT_NE(ran_on, std::this_thread::get_id());
  }
}

TEST(HostWorker, RethrowsTheFirstErrorOnceAndDropsTheTasksAfterIt) {
  HostWorker worker;
  std::atomic<int> ran{0};
  worker.submit([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the next ones queue behind
    throw std::runtime_error("first");
  });
  worker.submit([&ran] { ++ran; });
  worker.submit([] { throw std::runtime_error("second"); });
  try {
    worker.wait_idle();
    ADD_FAILURE() << "the error was not rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "first");
  }
  EXPECT_EQ(ran.load(), 0);
  EXPECT_NO_THROW(worker.wait_idle());  // reported once
  worker.submit([&ran] { ++ran; });     // after the report, tasks run again
  worker.wait_idle();
  EXPECT_EQ(ran.load(), 1);
}

TEST(HostWorker, DestructorRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    HostWorker worker;
    for (int i = 0; i < 10; ++i)
      worker.submit([&ran] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ++ran;
      });
  }
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
}  // namespace zt

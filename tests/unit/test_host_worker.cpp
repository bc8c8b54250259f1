// HostWorker (engine/offload/host_worker.h): tasks run in submission order on one thread other
// than the caller's; wait_idle() waits for them and rethrows the first error once, the tasks
// queued or submitted after it dropped until then; wait_for(ticket) waits for the tasks up to one
// while the later ones go on; the destructor runs what is queued.
#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/offload/host_worker.h"

namespace zt {
namespace {

// A task that fails after 20 ms, so that the tasks submitted next queue behind it.
void submit_failing_later(HostWorker& worker, const std::string& message) {
  worker.submit([message] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    throw std::runtime_error(message);
  });
}

template <class Wait>
void expect_rethrown(const std::string& message, Wait wait) {
  try {
    wait();
    ADD_FAILURE() << "the error '" << message << "' was not rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

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
  submit_failing_later(worker, "first");
  worker.submit([&ran] { ++ran; });
  worker.submit([] { throw std::runtime_error("second"); });
  expect_rethrown("first", [&worker] { worker.wait_idle(); });
  EXPECT_EQ(ran.load(), 0);
  EXPECT_NO_THROW(worker.wait_idle());  // reported once
  worker.submit([&ran] { ++ran; });     // after the report, tasks run again
  worker.wait_idle();
  EXPECT_EQ(ran.load(), 1);
}

TEST(HostWorker, WaitForReturnsWhenItsTaskIsDoneWhileTheLaterOnesRun) {
  HostWorker worker;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> first{0}, second{0};
  const uint64_t t1 = worker.submit([&first] { first = 1; });
  const uint64_t t2 = worker.submit([&second, released] {
    released.wait();  // runs until the test releases it
    second = 1;
  });
  EXPECT_EQ(t1, 1u);
  EXPECT_EQ(t2, 2u);
  worker.wait_for(t1);  // would hang here if it waited for the blocked second task
  EXPECT_EQ(first.load(), 1);
  EXPECT_EQ(second.load(), 0);
  release.set_value();
  worker.wait_for(t2);
  EXPECT_EQ(second.load(), 1);
}

TEST(HostWorker, WaitForATaskDroppedAfterAnErrorRethrowsTheErrorOnce) {
  HostWorker worker;
  std::atomic<int> ran{0};
  submit_failing_later(worker, "failed");
  const uint64_t queued = worker.submit([&ran] { ++ran; });
  // Dropped: finished without running.
  expect_rethrown("failed", [&worker, queued] { worker.wait_for(queued); });
  EXPECT_EQ(ran.load(), 0);
  const uint64_t after = worker.submit([&ran] { ++ran; });
  EXPECT_EQ(after, queued + 1);
  EXPECT_NO_THROW(worker.wait_for(after));  // reported once; tasks run again
  EXPECT_EQ(ran.load(), 1);
}

// HostWorker({cpu}) pins its thread there and sizes the OpenMP team its tasks start to it; the
// caller's thread keeps its own mask. The CPU is the last one this process may run on.
TEST(HostWorker, PinsItsThreadAndItsOpenMpTeamToTheGivenCpus) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  int cpu = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mine)) cpu = c;
  ASSERT_GE(cpu, 0);
  {  // Where threads may not be pinned (some sandboxes), the worker runs unpinned: nothing to see.
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    int refused = 0;
    std::thread probe([&] { refused = pthread_setaffinity_np(pthread_self(), sizeof(one), &one); });
    probe.join();
    if (refused != 0) GTEST_SKIP() << "this process may not pin threads";
  }
  cpu_set_t seen;
  CPU_ZERO(&seen);
  int team = 0;
  {
    HostWorker worker({cpu});
    worker.submit([&] {
      pthread_getaffinity_np(pthread_self(), sizeof(seen), &seen);
      team = omp_get_max_threads();
    });
    worker.wait_idle();
  }
  EXPECT_EQ(CPU_COUNT(&seen), 1);
  EXPECT_TRUE(CPU_ISSET(cpu, &seen));
  EXPECT_EQ(team, 1);
  cpu_set_t after;
  CPU_ZERO(&after);
  ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&after, &mine));  // the caller's thread is not pinned
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

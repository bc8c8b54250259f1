// One persistent host thread that runs tasks in the order they are submitted: the offloaded
// optimizer's CPU AdamW while the device computes (the exact overlap's speculative group updates,
// the delayed parameter update). Persistent, so that the OpenMP team the AdamW kernel starts from
// it is built once, not once per step. wait_idle() waits for every task submitted so far and
// wait_for(ticket) for the tasks up to one; both rethrow the first error a task threw. From that
// error until the wait that reports it, the tasks queued and submitted are dropped (they would
// build on the failed one's result) and count as finished.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zt {

class HostWorker {
 public:
  // cpus: the thread pins itself there first (runtime/cpu_placement.h's pin_this_thread), its
  // OpenMP team one thread per CPU; empty: unpinned.
  explicit HostWorker(std::vector<int> cpus = {});
  // Waits for the tasks queued so far (their errors are dropped), then ends the thread.
  ~HostWorker();
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  // Returns the task's ticket: 1 for the first task submitted, then 2, 3, ...
  uint64_t submit(std::function<void()> task);
  void wait_idle();
  // Waits until the task of `ticket` and every one before it have finished (run, or dropped
  // after an error); the worker goes on with the later ones.
  void wait_for(uint64_t ticket);

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  bool running_task_ = false, stopping_ = false;
  uint64_t submitted_ = 0, finished_ = 0;  // tickets handed out; tasks run or dropped
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace zt

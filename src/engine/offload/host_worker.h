// One persistent host thread that runs tasks in the order they are submitted: the offloaded
// optimizer's CPU AdamW while the device computes (the exact overlap's speculative group updates,
// the delayed parameter update). Persistent, so that the OpenMP team the AdamW kernel starts from
// it is built once, not once per step. wait_idle() waits for every task submitted so far and
// rethrows the first error a task threw; from that error until the wait_idle() that reports it,
// the tasks queued and submitted are dropped (they would build on the failed one's result).
#pragma once
#include <condition_variable>
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

  void submit(std::function<void()> task);
  void wait_idle();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  bool running_task_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace zt

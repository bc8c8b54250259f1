// One persistent host thread that runs tasks in the order they are submitted: the offloaded
// optimizer's CPU AdamW while the device computes (the exact overlap's speculative group updates,
// the delayed parameter update). Persistent, so that the OpenMP team the AdamW kernel starts from
// it is built once, not once per step. wait_idle() waits for every task submitted so far and
// rethrows the first error a task threw (the tasks after a failed one are dropped).
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace zt {

class HostWorker {
 public:
  HostWorker();
  // Waits for the tasks queued so far (their errors are dropped), then ends the thread.
  ~HostWorker();
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  void submit(std::function<void()> task);
  void wait_idle();
  // Whether a task is queued or running.
  bool busy();

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

#include "engine/offload/host_worker.h"

#include <utility>

#include "runtime/cpu_placement.h"

namespace zt {

HostWorker::HostWorker(std::vector<int> cpus)
    : thread_([this, cpus = std::move(cpus)] {
        pin_this_thread(cpus);  // unpinned when it cannot: slower, not wrong
        run();
      }) {}

HostWorker::~HostWorker() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void HostWorker::submit(std::function<void()> task) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (error_) return;  // dropped until wait_idle() reports the error
    queue_.push_back(std::move(task));
  }
  changed_.notify_all();
}

void HostWorker::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty() && !running_task_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void HostWorker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, with nothing left to run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    running_task_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    running_task_ = false;
    if (error && !error_) {
      error_ = error;
      queue_.clear();  // the tasks after a failed one would build on its result
    }
    changed_.notify_all();
  }
}

}  // namespace zt

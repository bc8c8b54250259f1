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

uint64_t HostWorker::submit(std::function<void()> task) {
  uint64_t ticket = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    ticket = ++submitted_;
    if (error_) {  // dropped until a wait reports the error
      ++finished_;
      return ticket;
    }
    queue_.push_back(std::move(task));
  }
  changed_.notify_all();
  return ticket;
}

void HostWorker::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty() && !running_task_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void HostWorker::wait_for(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this, ticket] { return finished_ >= ticket; });
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
    ++finished_;
    if (error && !error_) {
      error_ = error;
      finished_ += queue_.size();  // dropped: the tasks after a failed one would build on it
      queue_.clear();
    }
    changed_.notify_all();
  }
}

}  // namespace zt

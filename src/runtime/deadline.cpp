#include "runtime/deadline.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace zt {

Deadline::Deadline(double seconds, std::string operation, int rank)
    : operation_(std::move(operation)), rank_(rank) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return;
  watcher_ = std::thread([this, seconds] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; }))
      return;
    std::fprintf(stderr,
                 "zerotrain: TIMEOUT on rank %d: %s did not complete within %.0f s (another rank "
                 "may have failed or stopped); ending the job\n",
                 rank_, operation_.c_str(), seconds);
    std::fflush(stderr);
    std::_Exit(1);
  });
}

Deadline::~Deadline() {
  if (!watcher_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  watcher_.join();
}

}  // namespace zt

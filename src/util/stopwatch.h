// Wall time on the steady clock: a Stopwatch starts when it is made, and seconds() is the time
// since. Import, export, checkpoint and evaluation times and the offload optimizer's timed Adam
// passes read it; AddElapsedSeconds sums a scope's time, the cuDNN graph builds'
// (backend/attention_choice.h).
#pragma once
#include <chrono>

namespace zt {

class Stopwatch {
 public:
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Adds the seconds of its scope to `total` as it ends, by a throw too.
class AddElapsedSeconds {
 public:
  explicit AddElapsedSeconds(double& total) : total_(total) {}
  AddElapsedSeconds(const AddElapsedSeconds&) = delete;
  AddElapsedSeconds& operator=(const AddElapsedSeconds&) = delete;
  ~AddElapsedSeconds() { total_ += clock_.seconds(); }

 private:
  double& total_;
  Stopwatch clock_;
};

}  // namespace zt

// Wall time on the steady clock: a Stopwatch starts when it is made, and seconds() is the time
// since. Import, export, checkpoint and evaluation times, the offload optimizer's timed Adam
// passes and the cuDNN graph builds (backend/attention_choice.h) read it.
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

}  // namespace zt

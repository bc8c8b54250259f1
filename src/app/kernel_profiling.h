// `train --profile-steps A:B`: the device's kernel-time profile over training steps A..B
// (backend/kernel_profile.h), written to OUT/kernel_profile.json and printed as a table by rank 0.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace zt {

struct ProfileSteps {
  int64_t first = 0, last = 0;  // 1-based, inclusive; first = 0: off
  bool on() const { return first > 0; }
};

// "" (off), "A" (step A alone) or "A:B" with 1 <= A <= B <= steps. Throws zt::Error naming
// --profile-steps and the value.
ProfileSteps parse_profile_steps(const std::string& text, int64_t steps);

// Drives the backend's profiler around the training loop. Every rank makes one (so that a backend
// without a profiler fails on every rank alike); rank 0 records.
class StepProfiling {
 public:
  StepProfiling(Backend& backend, ProfileSteps steps, std::string out_dir, bool records);
  // Starts the recording before the first step of the window that runs (a resumed run past A
  // starts at its first step).
  void before_step(int64_t step);
  // Stops it after step B, then writes the profile.
  void after_step(int64_t step);

 private:
  ProfileSteps steps_;
  std::string out_dir_;
  bool records_;
  std::unique_ptr<KernelProfiler> profiler_;
  int64_t started_at_ = 0;
};

}  // namespace zt

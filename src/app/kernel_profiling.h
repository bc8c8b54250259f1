// `train --profile-steps A:B`: the device's kernel-time profile over training steps A..B
// (backend/kernel_profile.h), written to OUT/kernel_profile.json and printed as a table by rank 0.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace zt {

struct ProfileSteps {
  int64_t first = 0, last = 0;  // 1-based, inclusive; first = 0: off
  bool on() const { return first > 0; }
};

// "" (off), "A" (step A alone) or "A:B" with 1 <= A <= B. Throws zt::Error naming
// --profile-steps and the value.
ProfileSteps parse_profile_steps(const std::string& text);
// The window as --profile-steps gives it: "", "A" or "A:B".
std::string profile_steps_name(const ProfileSteps& p);
// Throws zt::Error naming --profile-steps, the window and --steps unless the window ends by then.
void check_profile_steps(const ProfileSteps& p, int64_t steps);

// Drives a profiler around the training loop: each step of the window is one ProfileWindow
// (from before its train_step to after it, the device drained at both ends), so checkpoint saves,
// logging and data loading between steps stay out of the figures. `profiler` is null when the
// profile is off; on ranks that do not record it is made anyway (a backend without one fails on
// every rank alike) and left idle.
class StepProfiling {
 public:
  // `trace_from_first_step`: the profiler records from the run's first step, what it recorded
  // before the window dropped at each step (the window's figures are the same). For CUDA graphs
  // (train --cuda-graphs on): graphs recorded before the tracing began may show no kernels.
  StepProfiling(ProfileSteps steps, std::string out_dir, bool records,
                std::unique_ptr<KernelProfiler> profiler, bool trace_from_first_step = false);
  // A run that ends inside the window says on stderr that no profile was written.
  ~StepProfiling();
  StepProfiling(const StepProfiling&) = delete;
  StepProfiling& operator=(const StepProfiling&) = delete;
  // Before a step's train_step: starts the recording at the window's first step that runs (a
  // resumed run past A starts at its first step; past B it says so once).
  void before_step(int64_t step);
  // After it: closes the step's window; after step B, stops and writes the profile.
  void after_step(int64_t step);

 private:
  // Starts the profiler, or drops what it recorded so far when it runs.
  void trace_afresh();
  ProfileSteps steps_;
  std::string out_dir_;
  bool records_;
  std::unique_ptr<KernelProfiler> profiler_;
  int64_t started_at_ = 0, last_step_ = 0;
  bool said_past_ = false;
  bool trace_from_first_step_ = false, tracing_ = false;  // tracing_: the profiler started
  std::vector<ProfileWindow> windows_;
};

// The profile of steps `first`..`last` (their windows and the recording) as a table, and as
// kernel_profile.json under out_dir.
void write_kernel_profile(const KernelProfiler::Recording& recording,
                          const std::vector<ProfileWindow>& windows, int64_t first, int64_t last,
                          const std::string& out_dir);

}  // namespace zt

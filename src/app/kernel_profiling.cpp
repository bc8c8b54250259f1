#include "app/kernel_profiling.h"

#include <iostream>
#include <utility>

#include "io/fs_util.h"
#include "util/error.h"

namespace zt {

namespace {

std::string profile_steps_usage(const std::string& text, const std::string& steps) {
  return "--profile-steps: expected A or A:B with 1 <= A <= B <= --steps" + steps + ", got '" +
         text + "'";
}

}  // namespace

ProfileSteps parse_profile_steps(const std::string& text) {
  ProfileSteps p;
  if (text.empty()) return p;
  const std::string usage = profile_steps_usage(text, "");
  auto number = [&](const std::string& part) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
      fail(usage);
    }
    ZT_CHECK(!part.empty() && used == part.size() && part[0] != '+' && part[0] != '-', usage);
    return static_cast<int64_t>(value);
  };
  const size_t colon = text.find(':');
  p.first = number(text.substr(0, colon));
  p.last = colon == std::string::npos ? p.first : number(text.substr(colon + 1));
  ZT_CHECK(p.first >= 1 && p.first <= p.last, usage);
  return p;
}

std::string profile_steps_name(const ProfileSteps& p) {
  if (!p.on()) return "";
  return std::to_string(p.first) + (p.last == p.first ? "" : ":" + std::to_string(p.last));
}

void check_profile_steps(const ProfileSteps& p, int64_t steps) {
  ZT_CHECK(p.last <= steps,
           profile_steps_usage(profile_steps_name(p), " (" + std::to_string(steps) + ")"));
}

StepProfiling::StepProfiling(ProfileSteps steps, std::string out_dir, bool records,
                             std::unique_ptr<KernelProfiler> profiler, bool trace_from_first_step)
    : steps_(steps),
      out_dir_(std::move(out_dir)),
      records_(records),
      profiler_(std::move(profiler)),
      trace_from_first_step_(trace_from_first_step) {
  ZT_CHECK(!steps_.on() || profiler_, "--profile-steps: no kernel profiler");
}

StepProfiling::~StepProfiling() {
  if (started_at_ > 0)
    std::cerr << "zerotrain train: --profile-steps " << steps_.first << ":" << steps_.last
              << ": the run ended after step " << last_step_ << ", inside the window: no "
              << "kernel profile written\n";
}

void StepProfiling::before_step(int64_t step) {
  if (!records_ || !profiler_) return;
  if (step > steps_.last && started_at_ == 0 && !said_past_) {
    std::cerr << "zerotrain train: --profile-steps " << steps_.first << ":" << steps_.last
              << ": those steps ran before this resume (it starts at step " << step
              << "): no kernel profile\n";
    said_past_ = true;
  }
  if (step > steps_.last) return;
  // Tracing from the first step: a CUDA graph instantiated before tracing began may not show its
  // kernels; what the steps before the window recorded is dropped at each step.
  if (step < steps_.first) {
    if (trace_from_first_step_) trace_afresh();
    return;
  }
  if (started_at_ == 0) {
    trace_afresh();
    started_at_ = step;
  }
  windows_.push_back({profiler_->now(), 0});
}

void StepProfiling::trace_afresh() {
  if (tracing_)
    profiler_->discard();
  else
    profiler_->start();
  tracing_ = true;
}

void StepProfiling::after_step(int64_t step) {
  if (started_at_ == 0) return;
  last_step_ = step;
  windows_.back().end_ns = profiler_->now();
  if (step != steps_.last) return;
  const KernelProfiler::Recording r = profiler_->stop();
  const int64_t first = started_at_;
  started_at_ = 0;
  write_kernel_profile(r, windows_, first, steps_.last, out_dir_);
  profiler_.reset();
}

void write_kernel_profile(const KernelProfiler::Recording& recording,
                          const std::vector<ProfileWindow>& windows, int64_t first, int64_t last,
                          const std::string& out_dir) {
  KernelProfile p = summarize_kernel_profile(recording.activities, windows, last - first + 1);
  p.dropped_records = recording.dropped_records;
  p.untimed_records = recording.untimed_records;
  const std::string path = out_dir + "/kernel_profile.json";
  write_text_file(path, kernel_profile_json(p));
  std::cout << "steps " << first << ".." << last << ": " << kernel_profile_table(p) << "(" << path
            << ")\n";
}

}  // namespace zt

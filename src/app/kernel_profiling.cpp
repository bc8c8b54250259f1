#include "app/kernel_profiling.h"

#include <iostream>
#include <utility>

#include "io/fs_util.h"
#include "util/error.h"

namespace zt {

ProfileSteps parse_profile_steps(const std::string& text, int64_t steps) {
  ProfileSteps p;
  if (text.empty()) return p;
  const std::string usage = "--profile-steps: expected A or A:B with 1 <= A <= B <= --steps (" +
                            std::to_string(steps) + "), got '" + text + "'";
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
  ZT_CHECK(p.first >= 1 && p.first <= p.last && p.last <= steps, usage);
  return p;
}

StepProfiling::StepProfiling(Backend& backend, ProfileSteps steps, std::string out_dir,
                             bool records)
    : steps_(steps), out_dir_(std::move(out_dir)), records_(records) {
  if (steps_.on()) profiler_ = backend.make_kernel_profiler();
}

void StepProfiling::before_step(int64_t step) {
  if (!records_ || !profiler_ || started_at_ > 0) return;
  if (step < steps_.first || step > steps_.last) return;
  profiler_->start();
  started_at_ = step;
}

void StepProfiling::after_step(int64_t step) {
  if (started_at_ == 0 || step != steps_.last) return;
  KernelProfiler::Recording r = profiler_->stop();
  KernelProfile p = summarize_kernel_profile(r.activities, r.window_start_ns, r.window_end_ns,
                                             steps_.last - started_at_ + 1);
  p.dropped_records = r.dropped_records;
  const std::string path = out_dir_ + "/kernel_profile.json";
  write_text_file(path, kernel_profile_json(p));
  std::cout << "steps " << started_at_ << ".." << steps_.last << ": " << kernel_profile_table(p)
            << "(" << path << ")\n";
  started_at_ = 0;
  profiler_.reset();
}

}  // namespace zt

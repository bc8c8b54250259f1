#include "backend/phase_timeline.h"

#include "util/error.h"

namespace zt {

PhaseTimeline::Mark HostClockTimeline::mark() {
  points_.push_back(std::chrono::steady_clock::now());
  return static_cast<Mark>(points_.size() - 1);
}

double HostClockTimeline::seconds(Mark from, Mark to) {
  const auto n = static_cast<Mark>(points_.size());
  ZT_CHECK(from >= 0 && to >= 0 && from < n && to < n,
           "HostClockTimeline: mark " + std::to_string(from < 0 || from >= n ? from : to) +
               " was not recorded since the last reset");
  return std::chrono::duration<double>(points_[static_cast<size_t>(to)] -
                                       points_[static_cast<size_t>(from)])
      .count();
}

void StepIntervals::reset() {
  intervals_.clear();
  timeline_.reset();
}

void StepIntervals::end(Kind kind, PhaseTimeline::Mark from) {
  intervals_.push_back({kind, from, timeline_.mark()});
}

double StepIntervals::total(Kind kind) {
  double sum = 0.0;
  for (const Interval& i : intervals_)
    if (i.kind == kind) sum += timeline_.seconds(i.from, i.to);
  return sum;
}

}  // namespace zt

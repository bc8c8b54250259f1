// StepIntervals: a step's intervals summed by kind, on any PhaseTimeline; HostClockTimeline:
// the CPU backend's timeline. (The CUDA event timeline is checked in tests/gpu.)
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backend/backend.h"
#include "backend/phase_timeline.h"
#include "util/error.h"

namespace zt {
namespace {

// A timeline whose k-th mark since the last reset is at k² seconds: interval lengths tell which
// marks an interval was made of.
class SquareTimeline final : public PhaseTimeline {
 public:
  Mark mark() override { return next_++; }
  double seconds(Mark from, Mark to) override {
    EXPECT_LT(from, next_);
    EXPECT_LT(to, next_);
    return static_cast<double>(to * to - from * from);
  }
  void reset() override {
    next_ = 0;
    ++resets;
  }
  int resets = 0;

 private:
  Mark next_ = 0;
};

TEST(StepIntervals, SumsEachKindOverItsOwnIntervals) {
  SquareTimeline timeline;
  StepIntervals intervals(timeline);
  intervals.reset();
  const auto forward = intervals.begin();             // 0
  intervals.end(StepIntervals::kForward, forward);    // 1: 1 s
  const auto backward = intervals.begin();            // 2
  const auto wait = intervals.begin();                // 3
  intervals.end(StepIntervals::kCommWait, wait);      // 4: 16 - 9 = 7 s, inside backward
  intervals.end(StepIntervals::kBackward, backward);  // 5: 25 - 4 = 21 s
  const auto forward2 = intervals.begin();            // 6
  intervals.end(StepIntervals::kForward, forward2);   // 7: 49 - 36 = 13 s
  EXPECT_DOUBLE_EQ(intervals.total(StepIntervals::kForward), 1.0 + 13.0);
  EXPECT_DOUBLE_EQ(intervals.total(StepIntervals::kBackward), 21.0);
  EXPECT_DOUBLE_EQ(intervals.total(StepIntervals::kCommWait), 7.0);
  EXPECT_DOUBLE_EQ(intervals.total(StepIntervals::kOptimizer), 0.0);

  // A new step forgets the old intervals and restarts the timeline's marks.
  intervals.reset();
  EXPECT_EQ(timeline.resets, 2);
  const auto opt = intervals.begin();             // 0
  intervals.end(StepIntervals::kOptimizer, opt);  // 1
  EXPECT_DOUBLE_EQ(intervals.total(StepIntervals::kOptimizer), 1.0);
  EXPECT_DOUBLE_EQ(intervals.total(StepIntervals::kForward), 0.0);
}

TEST(HostClockTimeline, MeasuresTheHostClockBetweenMarks) {
  HostClockTimeline timeline;
  const auto a = timeline.mark();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto t0 = std::chrono::steady_clock::now();
  const auto b = timeline.mark();
  const auto c = timeline.mark();
  const double between_marks = timeline.seconds(a, b);
  EXPECT_GE(between_marks, 0.020);  // sleep_for sleeps at least that long
  EXPECT_GE(timeline.seconds(b, c), 0.0);
  EXPECT_LE(timeline.seconds(b, c),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_DOUBLE_EQ(timeline.seconds(b, a), -between_marks);
}

TEST(HostClockTimeline, RefusesAMarkFromBeforeTheReset) {
  HostClockTimeline timeline;
  timeline.mark();
  const auto b = timeline.mark();
  timeline.reset();
  const auto a = timeline.mark();
  try {
    timeline.seconds(a, b);
    FAIL() << "a stale mark was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mark 1 was not recorded"), std::string::npos) << e.what();
  }
}

TEST(CpuBackend, SumSquaresToWritesTheSameSum) {
  auto backend = make_cpu_backend();
  std::vector<float> x(10'007);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) * 0.01f - 0.3f;
  double out = -1.0;
  backend->sum_squares_to(&out, x.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(out, backend->sum_squares(x.data(), static_cast<int64_t>(x.size())));
  double manual = 0.0;
  for (float v : x) manual += static_cast<double>(v) * v;
  EXPECT_NEAR(out, manual, 1e-9 * manual);
}

}  // namespace
}  // namespace zt

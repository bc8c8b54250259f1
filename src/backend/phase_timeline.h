// PhaseTimeline: points recorded in a backend's issue order, and the time the device took
// between two of them. The engine brackets its phases (forward, backward, optimizer) and its
// collective waits with marks, so the step's breakdown says what the device did, not when the
// host issued the work. On a GPU the host runs ahead of the stream: issue times would put the
// whole step into the one host wait at its end.
//   * A device backend records a timing event on its stream; mark() returns at once.
//   * A synchronous backend (the CPU) reads the host clock: the host is the device.
// seconds(from, to) may be asked once the device has passed `to` (it waits for that point).
// reset() starts a new step; marks taken before it are no longer valid.
#pragma once
#include <chrono>
#include <vector>

namespace zt {

class PhaseTimeline {
 public:
  using Mark = int;
  virtual ~PhaseTimeline() = default;
  virtual Mark mark() = 0;
  virtual double seconds(Mark from, Mark to) = 0;
  virtual void reset() = 0;
};

// The host clock's timeline (synchronous backends).
class HostClockTimeline final : public PhaseTimeline {
 public:
  Mark mark() override;
  double seconds(Mark from, Mark to) override;
  void reset() override { points_.clear(); }

 private:
  std::vector<std::chrono::steady_clock::time_point> points_;
};

// A step's intervals on a timeline, each of one kind, summed once the step's device work is
// done. Intervals of one kind may nest inside another's (collective waits inside backward).
class StepIntervals {
 public:
  enum Kind { kForward, kBackward, kOptimizer, kCommWait, kKinds };

  explicit StepIntervals(PhaseTimeline& timeline) : timeline_(timeline) {}
  // Forgets the previous step's intervals and marks.
  void reset();
  PhaseTimeline::Mark begin() { return timeline_.mark(); }
  // Ends an interval of `kind` that began at `from`, here in issue order.
  void end(Kind kind, PhaseTimeline::Mark from);
  // Issues `work` inside an interval of `kind`.
  template <typename Work>
  void time(Kind kind, Work&& work) {
    const PhaseTimeline::Mark from = begin();
    work();
    end(kind, from);
  }
  // Seconds per kind over every interval since reset() (waits for the last mark).
  double total(Kind kind);

 private:
  struct Interval {
    Kind kind;
    PhaseTimeline::Mark from, to;
  };
  PhaseTimeline& timeline_;
  std::vector<Interval> intervals_;
};

}  // namespace zt

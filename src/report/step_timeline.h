// Per-rank step phases of a training run (DeepSpeed wall_clock_breakdown spirit): every rank
// records each step's start and phase durations; at the end they are gathered (collective) into
// OUT/trace.json, a Chrome trace (chrome://tracing, ui.perfetto.dev) with one process per rank,
// and into the per-rank skew summary of report.json/report.md (slowest rank vs the median).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "report/metrics_log.h"

namespace zt {

struct StepPhases {
  int64_t step = 0;
  double start_s = 0;  // since the rank's training loop started
  double step_s = 0;   // data + train_step (what metrics.jsonl calls step_time_s)
  double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0, comm_wait_s = 0;
  double eval_s = 0;        // after the step: --eval-every's evaluation (0 when none)
  double checkpoint_s = 0;  // after that: stop agreement and checkpoint save
};

class StepTimeline {
 public:
  void add(const StepRecord& r) {
    steps_.push_back({r.step, r.start_s, r.step_time_s, r.data_s, r.stats.forward_s,
                      r.stats.backward_s, r.stats.optimizer_s, r.stats.comm_wait_s,
                      r.eval ? r.eval->seconds : 0.0, r.checkpoint_s});
  }
  const std::vector<StepPhases>& steps() const { return steps_; }

  // Every rank's phases, indexed by rank, on every rank. Collective; every rank must have
  // recorded the same number of steps (the loop is collective).
  std::vector<std::vector<StepPhases>> gather(Communicator& comm) const;

 private:
  std::vector<StepPhases> steps_;
};

// {"traceEvents":[{"name","cat","ph":"X","ts","dur","pid":rank,"tid"}...], ...}: per rank, tid 0
// the steps, tid 1 data/forward/backward/optimizer laid end to end from the measured durations,
// tid 2 the communication wait (inside backward/optimizer), tid 3 checkpoints. Times in µs.
nlohmann::json chrome_trace(const std::vector<std::vector<StepPhases>>& per_rank);

// Collective: gathers the timeline and rank 0 writes OUT/trace.json (chrome_trace). Returns the
// gathered phases (indexed by rank) on every rank.
std::vector<std::vector<StepPhases>> write_chrome_trace(const StepTimeline& timeline,
                                                        Communicator& comm,
                                                        const std::string& out_dir);

// Skew of step times across ranks: per step the slowest rank's time over the median; the mean and
// worst ratio, the slowest rank most often, and each rank's mean step time.
nlohmann::json rank_skew(const std::vector<std::vector<StepPhases>>& per_rank);
std::string rank_skew_markdown(const nlohmann::json& skew);

}  // namespace zt

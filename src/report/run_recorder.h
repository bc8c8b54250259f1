// The run's records in one place (docs/ARCHITECTURE.md §5): OUT/metrics.jsonl (rank 0), the
// per-rank phase timeline (OUT/trace.json, the rank skew), the summary behind report.md/json, and
// the memory peaks over the run. The training loop marks a step's moments; the recorder measures
// around them (clock, memory peaks, bytes on the wire), derives the throughput figures (tokens/s,
// TFLOP/s, MFU) and records one StepRecord per step.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "engine/engine_types.h"
#include "report/metrics_log.h"
#include "report/run_report.h"
#include "report/step_timeline.h"
#include "util/memory.h"

namespace zt {

// Dense bf16 peak of the device a backend runs on, in TFLOP/s (NVIDIA's datasheets, as
// torchtitan's get_peak_flops reads them: H100 SXM 989, PCIe 756, NVL 835); none for the CPU
// backend and for a GPU the table does not know, whose MFU is then left out, not guessed.
std::optional<double> dense_bf16_peak_tflops(const std::string& backend_name);

class RunRecorder {
 public:
  struct Setup {
    std::string out_dir;
    int64_t resume_step = -1;     // >= 0: metrics.jsonl continues after this (resumed) step
    nlohmann::json resumed_line;  // that step's line, from its checkpoint (MetricsLog)
    int64_t tokens_seen = 0;      // before this run's first step
    double flops_per_token = 0;
    std::string backend_name;  // for the device's peak (MFU)
    int zero_stage = 0;        // with the data communicator's world size: the run's layout
  };
  // host: the communicator of the end-of-run gathers (collective constructor: rank 0 opens
  // metrics.jsonl); data: the one whose bytes count; memory: whose peaks are recorded.
  RunRecorder(Communicator& host, Communicator& data, MemoryTracker& memory, const Setup& setup);

  // A step begins: its clock starts, memory peaks reset, collective counters are read.
  void begin_step(int64_t step);
  // The step's data is ready (its data time ends).
  void data_ready();
  // The engine finished the step: its figures, without the checkpoint time yet. scratch_bytes:
  // the backend's device scratch after the step (Backend::scratch_bytes).
  const StepRecord& trained(float lr, const StepStats& stats, int64_t scratch_bytes);
  // --eval-every evaluated the weights after the step (before the stop agreement and any save):
  // its figures join the step's record, its seconds apart from the checkpoint's.
  void evaluated(const StepEval& eval);
  // The stop agreement and any save are done: the step is recorded everywhere.
  const StepRecord& end_step();
  double loop_seconds() const;  // since the first begin_step
  // The evaluation of the latest step recorded (none when that step had none).
  std::optional<StepEval> last_eval() const { return current_.eval; }

  // Collective: every rank's phases; rank 0 writes OUT/trace.json.
  void write_trace();
  // Collective, after the last step: trace.json, every rank's peaks, then rank 0 writes
  // report.json/md (the summary plus `extra`'s fields and the rank skew) and the plots.
  void write_report(const nlohmann::json& extra, double total_time_s);

 private:
  using Clock = std::chrono::steady_clock;
  Communicator& host_;
  Communicator& data_;
  MemoryTracker& memory_;
  Setup setup_;
  std::optional<double> peak_tflops_;
  MetricsLog metrics_;
  StepTimeline timeline_;
  RunSummary summary_;
  // A resumed run's earlier steps at another world size or ZeRO stage, as report.json's
  // steps_at_other_layouts: [{"first_step", "last_step", "world_size", "zero_stage"}]
  // (consecutive steps of one layout in one entry).
  nlohmann::json other_layouts_ = nlohmann::json::array();
  MemoryByCategory run_peaks_{};
  StepRecord current_;
  CommCounters counters_at_start_;
  Clock::time_point loop_start_, step_start_, trained_at_;
  bool started_ = false;
  std::vector<std::vector<StepPhases>> per_rank_phases_;
};

}  // namespace zt

// Per-step training metrics (docs/ARCHITECTURE.md §5): one JSON object per step appended to
// OUT/metrics.jsonl and flushed at once, so a crash keeps every line written so far.
#pragma once
#include <array>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "engine/engine_types.h"
#include "util/memory.h"

namespace zt {

using MemoryByCategory = std::array<uint64_t, kNumMemCategories>;
using BytesByCollective = std::array<uint64_t, kNumCollectiveOps>;

// Peak bytes per category since the tracker's last reset_peaks().
MemoryByCategory memory_peaks(const MemoryTracker& tracker);
// bytes_sent per collective op between two counter snapshots.
BytesByCollective comm_bytes_between(const CommCounters& before, const CommCounters& after);

// ZeRO-Offload traffic (bytes): device↔host copies and NVMe swap-file I/O.
struct OffloadBytes {
  uint64_t device_to_host = 0, host_to_device = 0, nvme_read = 0, nvme_write = 0;
  OffloadBytes& operator+=(const OffloadBytes& o);
  OffloadBytes divided_by(uint64_t n) const;  // per-step means (n = 0 gives zeros)
};

nlohmann::json memory_json(const MemoryByCategory& bytes);       // {"params": .., ...}
nlohmann::json offload_bytes_json(const OffloadBytes& bytes);    // {"device_to_host": .., ...}
nlohmann::json comm_bytes_json(const BytesByCollective& bytes);  // {"all_gather": .., ...}

// An evaluation after a step (train --eval-every): the mean loss over the counted targets of the
// evaluated windows, how many counted, and its seconds (after the step, before any save).
struct StepEval {
  double loss = 0;
  int64_t loss_tokens = 0;
  double seconds = 0;
};

// One training step, as the run records it: what the engine reported (StepStats) and what the
// loop measured around it, with the derived throughput figures. metrics.jsonl, the timeline and
// the summary are all written from this one record.
struct StepRecord {
  int64_t step = 0;  // 1-based
  double lr = 0;
  StepStats stats;          // loss, norm, tokens, phase times, offload traffic of the step
  int64_t tokens_seen = 0;  // cumulative
  double start_s = 0;       // since the rank's training loop started
  double step_time_s = 0, data_s = 0;
  double checkpoint_s = 0;  // after the step: stop agreement + checkpoint save (0 when none)
  double tokens_per_s = 0, flops_per_token = 0, tflops_per_device = 0;
  std::optional<double> mfu;  // null when the device has no meaningful peak (CPU)
  MemoryByCategory peak_memory{};
  // Device scratch outside the categories, after the step (Backend::scratch_bytes).
  int64_t backend_scratch_bytes = 0;
  BytesByCollective comm_bytes{};
  std::optional<StepEval> eval;  // steps that --eval-every evaluates after
  // The layout the step ran at: the data communicator's world size and the ZeRO stage (0 and -1
  // in a line an older release wrote: unknown). A resume may change both.
  int world_size = 0, zero_stage = -1;
  // Whether the step counts as run at this layout: its own, or unknown (an older release's line).
  bool ran_at(int world, int stage) const {
    return world_size == 0 || (world_size == world && zero_stage == stage);
  }
  // The first step this process ran (the run's, or a resumed part's): it pays one-time costs
  // (page faults, thread pools, plans), so the summary's means leave it out.
  bool first_of_process = false;

  OffloadBytes offload_bytes() const {
    return {stats.offload_d2h_bytes, stats.offload_h2d_bytes, stats.nvme_read_bytes,
            stats.nvme_write_bytes};
  }
  nlohmann::json to_json() const;
  // The figures a run's summary takes, read back from a metrics.jsonl line (a resumed run's
  // earlier steps); a null loss (a skipped fp16 step) reads as NaN.
  static StepRecord from_json(const nlohmann::json& line);
  // A line's first_of_process (false when absent, as in an older release's line).
  static bool first_of_process_in(const nlohmann::json& line);
};

class MetricsLog {
 public:
  MetricsLog() = default;  // inactive: append() does nothing (ranks other than 0)
  // Starts a new log, or with `resume_after_step` >= 0 continues an existing one: lines of later
  // steps (written after the checkpoint being resumed) are dropped first, then appended to.
  // `resumed_line`: the line of step resume_after_step that the checkpoint carries; appended
  // when the log lacks it (a kill between the checkpoint's commit and the line's write).
  explicit MetricsLog(const std::string& path, int64_t resume_after_step = -1,
                      const nlohmann::json& resumed_line = nullptr);
  void append(const StepRecord& record);

  // A resumed log's lines of the steps before this process's first, in step order.
  const std::vector<nlohmann::json>& earlier_steps() const { return earlier_; }
  // The steps through resume_after_step that the log lacks (it was cut short, or edited), as
  // "4-7" ranges; empty when it is whole.
  const std::vector<std::string>& missing_steps() const { return missing_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::vector<nlohmann::json> earlier_;
  std::vector<std::string> missing_;
};

}  // namespace zt

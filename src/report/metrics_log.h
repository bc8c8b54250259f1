// Per-step training metrics (docs/ARCHITECTURE.md §5): one JSON object per step appended to
// OUT/metrics.jsonl and flushed at once, so a crash keeps every line written so far.
#pragma once
#include <array>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "model/config.h"
#include "util/memory.h"

namespace zt {

using MemoryByCategory = std::array<uint64_t, kNumMemCategories>;
using BytesByCollective = std::array<uint64_t, kNumCollectiveOps>;

// Useful training FLOPs per token (torchtitan's convention, docs/ARCHITECTURE.md §5):
// 6·Ψ_nonembedding + 12·L·H·head_dim·T. Recomputation is not counted.
double training_flops_per_token(const ModelConfig& config, int64_t non_embedding_params,
                                int64_t seq_len);

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

struct StepRecord {
  int64_t step = 0;  // 1-based
  double loss = 0, lr = 0, grad_norm = 0, clip_scale = 1;
  int64_t tokens = 0;       // global batch tokens
  int64_t tokens_seen = 0;  // cumulative
  double step_time_s = 0, tokens_per_s = 0;
  double flops_per_token = 0, tflops_per_device = 0;
  std::optional<double> mfu;  // null when the device has no meaningful peak (CPU)
  double forward_s = 0, backward_s = 0, optimizer_s = 0, comm_wait_s = 0, data_s = 0;
  double checkpoint_s = 0;  // after the step: stop agreement + checkpoint save (0 when none)
  MemoryByCategory peak_memory{};
  BytesByCollective comm_bytes{};
  OffloadBytes offload_bytes;  // this step's offload traffic

  nlohmann::json to_json() const;
};

class MetricsLog {
 public:
  MetricsLog() = default;  // inactive: append() does nothing (ranks other than 0)
  // Starts a new log, or with `resume_after_step` >= 0 continues an existing one: lines of later
  // steps (written after the checkpoint being resumed) are dropped first, then appended to.
  explicit MetricsLog(const std::string& path, int64_t resume_after_step = -1);
  void append(const StepRecord& record);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace zt

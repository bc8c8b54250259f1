// End-of-run files (docs/ARCHITECTURE.md §5): OUT/run.json (what ran: version, resolved
// configuration, world, hosts, libraries) and OUT/report.json + OUT/report.md (summary of the
// metrics).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/attention_graph_report.h"
#include "backend/backend.h"
#include "backend/gemm_tuning.h"
#include "engine/micro_batch_graphs.h"
#include "report/metrics_log.h"

namespace zt {

// {"zerotrain", "mpi", "hdf5", "openblas", "compiler"} version strings.
nlohmann::json library_versions();

struct RunInfo {
  std::string command;    // "train"
  nlohmann::json config;  // every resolved option value
  int world_size = 1;
  std::vector<std::string> hostnames;  // by rank
  std::string backend;                 // compute backend name ("cpu")
  std::string communicator;            // "mpi"
  std::string precision;               // "bf16" | "fp32"
  nlohmann::json model;                // HF config of the trained model
  int64_t parameters = 0;
  int64_t non_embedding_parameters = 0;
  int64_t trainable_parameters = 0;  // of the tensors --trainable/--freeze leave training
  std::vector<std::string> frozen_tensors = {};  // the others, by name
  // By rank: {"host", "local_rank", "local_size"} as the hostname-based placement computes them.
  nlohmann::json placement = nlohmann::json::array();
};
nlohmann::json run_json(const RunInfo& info);

// Accumulates the per-step records into the summary of report.json.
class RunSummary {
 public:
  // A step of the run. Its loss, tokens and evaluation always count. Its throughput, time and
  // traffic count when `in_figures` (a step at the run's own layout: RunRecorder leaves out a
  // resumed run's earlier steps at another world size or ZeRO stage); the means leave out the
  // run's first step and each process's first (StepRecord::first_of_process).
  void add(const StepRecord& record, bool in_figures = true);
  int64_t steps() const { return steps_; }

  // peak_memory_per_rank[r]: rank r's peak bytes per category over the whole run.
  nlohmann::json to_json(const std::vector<MemoryByCategory>& peak_memory_per_rank,
                         double total_time_s) const;

 private:
  int64_t steps_ = 0;
  int64_t steps_in_figures_ = 0, steps_in_means_ = 0;
  double first_loss_ = 0, final_loss_ = 0;
  double tokens_per_s_after_first_ = 0;  // sum over the steps in the means
  double tflops_after_first_ = 0;        // sum over the steps in the means
  double train_time_s_ = 0;
  int64_t tokens_seen_ = 0;
  double flops_per_token_ = 0;
  BytesByCollective comm_bytes_total_{};
  OffloadBytes offload_bytes_total_;
  // Rank 0's CPU AdamW of optimizer offload, over the steps after the first: elements updated
  // and the kernel's seconds (report.json's host_adam, its measured rate).
  int64_t host_adam_params_after_first_ = 0;
  double host_adam_s_after_first_ = 0;
  std::vector<std::pair<int64_t, StepEval>> evals_;  // (step, its eval): --eval-every's
};

// Human-readable rendering of a report.json object.
// --gemm-algorithms timed: the tally of a rank's GEMM shapes (backend/gemm_tuning.h), as
// report.json's `gemm_algorithms`.
nlohmann::json gemm_tuning_json(const GemmTuningReport& tally);
// The fused attention's graphs (backend/attention_graph_report.h), as report.json's
// `attention_graphs`: {"built", "build_s", "built_in_steps", "build_s_in_steps",
// "workspace_bytes"} (in steps: after start-up's prepare).
nlohmann::json attention_graphs_json(const AttentionGraphReport& graphs);

// What the backend tallied over the run, for report.json (the rank's own; report.json is rank
// 0's): `gemm_algorithms` (--gemm-algorithms timed) and `attention_graphs` (the fused attention),
// each where the backend has it; and one line of each for the log.
struct BackendTallies {
  nlohmann::json fields = nlohmann::json::object();
  std::vector<std::string> log_lines;
};
// The backend's GEMM and attention tallies, and `graphs` where the run asked for CUDA graphs.
BackendTallies backend_tallies(const Backend& backend,
                               const MicroBatchGraphs::Report* graphs = nullptr);

std::string report_markdown(const nlohmann::json& report);

// Writes OUT/report.json and OUT/report.md.
void write_report_files(const std::string& out_dir, const nlohmann::json& report);

}  // namespace zt

// Scaling-study reports: `zerotrain report RUN_DIRS... --out DIR` reads finished run directories
// (run.json, metrics.jsonl, report.json) and writes a scaling table (Markdown + CSV) and SVG plots
// (throughput vs ranks per stage, peak memory per rank by stage, loss curves overlaid). Also the
// SVG plots of a single run (loss and step time per step) that `train` links from report.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

struct RunData {
  std::string dir;
  nlohmann::json run;                   // run.json
  nlohmann::json report;                // report.json (null when the run did not finish)
  std::vector<nlohmann::json> metrics;  // metrics.jsonl, one object per step
};

// Reads a run directory; fails naming the directory and the missing or unreadable file.
RunData load_run_dir(const std::string& dir);

struct ScalingRow {
  std::string run;    // directory name (with its parent's where two runs share one)
  std::string dir;    // the directory as given
  std::string model;  // "d64 L2 H4/2 V256 (0.46M)": hidden size, layers, heads/kv heads, vocab
  int stage = 0;
  int ranks = 1;
  int64_t micro_batch = 0, grad_accum = 0, seq_len = 0;
  std::string checkpointing;
  std::string precision;
  // What a per-rank throughput compares across: the backend, the model's config, the sequence
  // length, the
  // micro-batch and grad-accum, checkpointing, precision and offload. Efficiency is within the
  // rows of one stage and one comparison.
  std::string comparison;
  double tokens_per_s = 0;           // mean over steps after the first (all of them if one)
  double tokens_per_s_per_rank = 0;  // tokens_per_s / ranks
  std::optional<double> efficiency;  // per-rank throughput vs its stage's and comparison's
                                     // run of the fewest ranks
  int baseline_ranks = 0;            // that baseline's rank count (1 when present)
  std::optional<double> mfu;         // mean MFU (none on CPU)
  nlohmann::json measured_memory;    // max over ranks of each category's peak bytes
  nlohmann::json estimated_memory;   // engine/estimator.h prediction per category (or null)
  uint64_t comm_bytes_per_step = 0;  // all collectives, bytes sent per rank
  double final_loss = 0;
  // The last step its metrics.jsonl holds and the steps run.json planned (0: not recorded). A run
  // is unfinished without report.json (stopped, killed, preempted) or short of its steps.
  int64_t last_step = 0, planned_steps = 0;
  bool finished = false;
  // report.json's end-of-training evaluation (train --eval-batches): its loss, the windows of
  // T + 1 tokens it scored and the file; none when the run did not evaluate or finish.
  std::optional<double> eval_loss;
  int64_t eval_windows = 0;
  std::string eval_data;
};

// One row per run, sorted by stage, model, sequence length, micro-batch, grad-accum, then ranks;
// efficiency filled in.
std::vector<ScalingRow> scaling_rows(const std::vector<RunData>& runs);

// With an eval column, and a warning beside it when the rows' evaluations scored different windows
// (--eval-batches K scores K·N·B, which differ with the ranks).
std::string scaling_table_markdown(const std::vector<ScalingRow>& rows);
std::string scaling_table_csv(const std::vector<ScalingRow>& rows);

// Writes OUT/scaling.md, OUT/scaling.csv, OUT/scaling.json, OUT/throughput_vs_ranks.svg,
// OUT/memory_per_rank.svg and OUT/loss_curves.svg. Returns the files written.
std::vector<std::string> write_study_report(const std::vector<RunData>& runs,
                                            const std::string& out_dir);

// A run's own plots from its metrics lines: OUT/loss.svg and OUT/step_time.svg (forward,
// backward, optimizer, comm wait, data, checkpoint and total per step). Returns Markdown that
// embeds them (for report.md).
std::string write_run_plots(const std::vector<nlohmann::json>& metrics, const std::string& out_dir);

// End of `train` (rank 0): writes the run's plots from OUT/metrics.jsonl and appends them and the
// rank-skew table (report/step_timeline.h) to OUT/report.md.
void add_plots_and_skew_to_report(const std::string& out_dir, const nlohmann::json& rank_skew);

}  // namespace zt

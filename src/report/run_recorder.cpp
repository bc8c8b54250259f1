#include "report/run_recorder.h"

#include <algorithm>
#include <cctype>
#include <iostream>

#include "comm/collective_outcome.h"
#include "report/study_report.h"

namespace zt {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Adds `step` to the last entry of `layouts` when it continues it (the next step, the same
// layout), else a new entry.
void note_other_layout(nlohmann::json& layouts, const StepRecord& step) {
  if (!layouts.empty()) {
    nlohmann::json& last = layouts.back();
    if (last.at("last_step") == step.step - 1 && last.at("world_size") == step.world_size &&
        last.at("zero_stage") == step.zero_stage) {
      last["last_step"] = step.step;
      return;
    }
  }
  layouts.push_back({{"first_step", step.step},
                     {"last_step", step.step},
                     {"world_size", step.world_size},
                     {"zero_stage", step.zero_stage}});
}

}  // namespace

std::optional<double> dense_bf16_peak_tflops(const std::string& backend_name) {
  // The CUDA backend's name is "cuda:" and the device's name in lower case (cudaDeviceProp).
  if (backend_name.rfind("cuda:", 0) != 0) return std::nullopt;
  const auto has = [&](const char* part) { return backend_name.find(part) != std::string::npos; };
  // A model number as a word of the name: "a100" in "nvidia a100-sxm4-80gb", not in "rtx a1000".
  const auto model = [&](const char* number) {
    for (size_t at = backend_name.find(number); at != std::string::npos;
         at = backend_name.find(number, at + 1)) {
      const size_t end = at + std::char_traits<char>::length(number);
      const bool starts =
          at == 0 || !std::isalnum(static_cast<unsigned char>(backend_name[at - 1]));
      const bool ends = end == backend_name.size() ||
                        !std::isalnum(static_cast<unsigned char>(backend_name[end]));
      if (starts && ends) return true;
    }
    return false;
  };
  // Hopper: the SXM parts (H100 SXM, H800, H200, GH200) at 989; the PCIe and NVL cards are
  // clocked lower.
  if (model("h100") || model("h800") || model("h200") || model("gh200"))
    return has("nvl") ? 835.0 : has("pcie") ? 756.0 : 989.0;
  if (model("gb200")) return 2500.0;
  if (model("b200")) return 2250.0;
  if (model("a100") || model("a800")) return 312.0;
  if (model("l40s")) return 362.0;
  return std::nullopt;
}

RunRecorder::RunRecorder(Communicator& host, Communicator& data, MemoryTracker& memory,
                         const Setup& setup)
    : host_(host),
      data_(data),
      memory_(memory),
      setup_(setup),
      peak_tflops_(dense_bf16_peak_tflops(setup.backend_name)),
      run_peaks_(memory_peaks(memory)) {
  current_.tokens_seen = setup.tokens_seen;
  run_collectively(host_, [&] {
    if (host_.rank() != 0) return;
    metrics_ =
        MetricsLog(setup_.out_dir + "/metrics.jsonl", setup_.resume_step, setup_.resumed_line);
    // A resumed run's report covers the whole run: the earlier steps come from the log. Their
    // throughput, time and traffic count only at this run's layout (a line without one, from an
    // older release, counts as this run's).
    for (const nlohmann::json& line : metrics_.earlier_steps()) {
      const StepRecord earlier = StepRecord::from_json(line);
      const bool here = earlier.ran_at(data_.world_size(), setup_.zero_stage);
      summary_.add(earlier, here);
      if (!here) note_other_layout(other_layouts_, earlier);
    }
    if (!metrics_.missing_steps().empty()) {
      std::string ranges;
      for (const std::string& r : metrics_.missing_steps())
        ranges += (ranges.empty() ? "" : ", ") + r;
      std::cerr << "zerotrain train: warning: " << setup_.out_dir << "/metrics.jsonl lacks steps "
                << ranges
                << " of the run being resumed (cut "
                   "short or edited); report.json lists them as missing and its figures leave "
                   "them out\n";
    }
  });
}

void RunRecorder::begin_step(int64_t step) {
  step_start_ = Clock::now();
  const bool first_of_process = !started_;
  if (!started_) loop_start_ = step_start_, started_ = true;
  memory_.reset_peaks();
  counters_at_start_ = data_.counters();
  const int64_t tokens_seen = current_.tokens_seen;
  current_ = StepRecord{};
  current_.step = step;
  current_.tokens_seen = tokens_seen;
  current_.world_size = data_.world_size();
  current_.zero_stage = setup_.zero_stage;
  current_.first_of_process = first_of_process;
  current_.start_s = seconds_between(loop_start_, step_start_);
}

void RunRecorder::data_ready() {
  current_.data_s = seconds_between(step_start_, Clock::now());
}

const StepRecord& RunRecorder::trained(float lr, const StepStats& stats, int64_t scratch_bytes) {
  trained_at_ = Clock::now();
  StepRecord& r = current_;
  r.lr = lr;
  r.stats = stats;
  r.step_time_s = seconds_between(step_start_, trained_at_);
  r.tokens_seen += stats.tokens;
  r.tokens_per_s = static_cast<double>(stats.tokens) / r.step_time_s;
  r.flops_per_token = setup_.flops_per_token;
  r.tflops_per_device = r.flops_per_token * r.tokens_per_s / data_.world_size() / 1e12;
  if (peak_tflops_) r.mfu = r.tflops_per_device / *peak_tflops_;
  r.peak_memory = memory_peaks(memory_);
  r.backend_scratch_bytes = scratch_bytes;
  r.comm_bytes = comm_bytes_between(counters_at_start_, data_.counters());
  for (size_t c = 0; c < run_peaks_.size(); ++c)
    run_peaks_[c] = std::max(run_peaks_[c], r.peak_memory[c]);
  return r;
}

void RunRecorder::evaluated(const StepEval& eval) {
  current_.eval = eval;
}

const StepRecord& RunRecorder::end_step() {
  const double after_step_s = seconds_between(trained_at_, Clock::now());
  current_.checkpoint_s = after_step_s - (current_.eval ? current_.eval->seconds : 0.0);
  timeline_.add(current_);
  metrics_.append(current_);
  summary_.add(current_);
  return current_;
}

double RunRecorder::loop_seconds() const {
  return started_ ? seconds_between(loop_start_, Clock::now()) : 0.0;
}

void RunRecorder::write_trace() {
  per_rank_phases_ = write_chrome_trace(timeline_, host_, setup_.out_dir);
}

void RunRecorder::write_report(const nlohmann::json& extra, double total_time_s) {
  // Peak memory of every rank, gathered to all (int64 is a reducible comm type).
  std::vector<int64_t> mine(run_peaks_.begin(), run_peaks_.end());
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(host_.world_size()));
  host_.all_gather_blocking(mine.data(), all.data(), mine.size());
  std::vector<MemoryByCategory> per_rank(static_cast<size_t>(host_.world_size()));
  for (size_t r = 0; r < per_rank.size(); ++r)
    for (size_t c = 0; c < mine.size(); ++c)
      per_rank[r][c] = static_cast<uint64_t>(all[r * mine.size() + c]);
  write_trace();
  run_collectively(host_, [&] {
    if (host_.rank() != 0) return;
    nlohmann::json report = summary_.to_json(per_rank, total_time_s);
    report.update(extra);
    if (setup_.resume_step >= 0) {
      report["resumed_after_step"] = setup_.resume_step;
      report["steps_missing_from_metrics"] = metrics_.missing_steps();
      if (!other_layouts_.empty()) report["steps_at_other_layouts"] = other_layouts_;
    }
    report["rank_skew"] = rank_skew(per_rank_phases_);
    write_report_files(setup_.out_dir, report);
    add_plots_and_skew_to_report(setup_.out_dir, report["rank_skew"]);
  });
}

}  // namespace zt

#include "report/metrics_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "io/fs_util.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

MemoryByCategory memory_peaks(const MemoryTracker& tracker) {
  MemoryByCategory out{};
  for (int c = 0; c < kNumMemCategories; ++c)
    out[static_cast<size_t>(c)] = tracker.peak(static_cast<MemCategory>(c));
  return out;
}

BytesByCollective comm_bytes_between(const CommCounters& before, const CommCounters& after) {
  BytesByCollective out{};
  for (size_t op = 0; op < out.size(); ++op)
    out[op] = after.by_op[op].bytes_sent - before.by_op[op].bytes_sent;
  return out;
}

nlohmann::json memory_json(const MemoryByCategory& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kNumMemCategories; ++c)
    j[mem_category_name(static_cast<MemCategory>(c))] = bytes[static_cast<size_t>(c)];
  return j;
}

OffloadBytes& OffloadBytes::operator+=(const OffloadBytes& o) {
  device_to_host += o.device_to_host;
  host_to_device += o.host_to_device;
  nvme_read += o.nvme_read;
  nvme_write += o.nvme_write;
  return *this;
}

OffloadBytes OffloadBytes::divided_by(uint64_t n) const {
  if (n == 0) return {};
  return {device_to_host / n, host_to_device / n, nvme_read / n, nvme_write / n};
}

nlohmann::json offload_bytes_json(const OffloadBytes& b) {
  return {{"device_to_host", b.device_to_host},
          {"host_to_device", b.host_to_device},
          {"nvme_read", b.nvme_read},
          {"nvme_write", b.nvme_write}};
}

nlohmann::json comm_bytes_json(const BytesByCollective& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (int op = 0; op < kNumCollectiveOps; ++op)
    j[collective_op_name(static_cast<CollectiveOp>(op))] = bytes[static_cast<size_t>(op)];
  return j;
}

nlohmann::json StepRecord::to_json() const {
  nlohmann::json j;
  j["step"] = step;
  // A skipped fp16 step may have overflowed in the forward too: its loss is then null.
  j["loss"] = std::isfinite(stats.loss) ? nlohmann::json(stats.loss) : nlohmann::json(nullptr);
  j["lr"] = lr;
  j["grad_norm"] = stats.grad_norm;
  j["clip_scale"] = stats.clip_scale;
  if (stats.loss_scale > 0) {  // fp16 runs: the loss scale this step used, and whether it skipped
    j["loss_scale"] = stats.loss_scale;
    j["skipped"] = stats.skipped;
  }
  j["tokens"] = stats.tokens;
  j["loss_tokens"] = stats.loss_targets;
  j["tokens_seen"] = tokens_seen;
  j["step_time_s"] = step_time_s;
  j["tokens_per_s"] = tokens_per_s;
  j["flops_per_token"] = flops_per_token;
  j["tflops_per_device"] = tflops_per_device;
  j["mfu"] = mfu ? nlohmann::json(*mfu) : nlohmann::json(nullptr);
  j["time"] = {{"forward_s", stats.forward_s},
               {"backward_s", stats.backward_s},
               {"optimizer_s", stats.optimizer_s},
               {"comm_wait_s", stats.comm_wait_s},
               {"data_s", data_s},
               {"checkpoint_s", checkpoint_s}};
  if (eval) {  // named as the Hugging Face Trainer logs them
    j["eval_loss"] = eval->loss;
    j["eval_loss_tokens"] = eval->loss_tokens;
    j["time"]["eval_s"] = eval->seconds;
  }
  j["peak_memory_bytes"] = memory_json(peak_memory);
  j["backend_scratch_bytes"] = backend_scratch_bytes;
  j["comm_bytes"] = comm_bytes_json(comm_bytes);
  j["offload_bytes"] = offload_bytes_json(offload_bytes());
  j["world_size"] = world_size;
  j["zero_stage"] = zero_stage;
  if (first_of_process) j["first_of_process"] = true;
  // Optimizer offload: this rank's CPU AdamW, so that the host's rate is visible step by step.
  if (stats.host_adam_params > 0)
    j["host_adam"] = {
        {"params", stats.host_adam_params},
        {"seconds", stats.host_adam_s},
        {"params_per_s", stats.host_adam_s > 0
                             ? static_cast<double>(stats.host_adam_params) / stats.host_adam_s
                             : 0.0}};
  if (!stats.host_adam_speculation.empty()) {
    j["host_adam"]["speculation"] = stats.host_adam_speculation;
    j["host_adam"]["speculated_params"] = stats.host_adam_speculated_params;
  }
  return j;
}

bool StepRecord::first_of_process_in(const nlohmann::json& line) {
  const auto first = line.find("first_of_process");
  return first != line.end() && first->is_boolean() && first->get<bool>();
}

StepRecord StepRecord::from_json(const nlohmann::json& line) {
  StepRecord r;
  const auto number = [&](const char* key) {
    const auto it = line.find(key);
    return it != line.end() && it->is_number() ? it->get<double>()
                                               : std::numeric_limits<double>::quiet_NaN();
  };
  r.step = line.value("step", int64_t{0});
  r.stats.loss = number("loss");
  r.tokens_seen = line.value("tokens_seen", int64_t{0});
  r.step_time_s = number("step_time_s");
  r.tokens_per_s = number("tokens_per_s");
  r.tflops_per_device = number("tflops_per_device");
  r.flops_per_token = number("flops_per_token");
  const auto integer = [&](const char* key, int unknown) {
    const auto it = line.find(key);
    return it != line.end() && it->is_number_integer() ? it->get<int>() : unknown;
  };
  r.world_size = integer("world_size", 0);
  r.zero_stage = integer("zero_stage", -1);
  r.first_of_process = first_of_process_in(line);
  const nlohmann::json comm = line.value("comm_bytes", nlohmann::json::object());
  for (size_t op = 0; op < r.comm_bytes.size(); ++op) {
    const auto it = comm.find(collective_op_name(static_cast<CollectiveOp>(op)));
    if (it != comm.end() && it->is_number_unsigned()) r.comm_bytes[op] = it->get<uint64_t>();
  }
  const nlohmann::json offload = line.value("offload_bytes", nlohmann::json::object());
  r.stats.offload_d2h_bytes = offload.value("device_to_host", uint64_t{0});
  r.stats.offload_h2d_bytes = offload.value("host_to_device", uint64_t{0});
  r.stats.nvme_read_bytes = offload.value("nvme_read", uint64_t{0});
  r.stats.nvme_write_bytes = offload.value("nvme_write", uint64_t{0});
  const nlohmann::json host_adam = line.value("host_adam", nlohmann::json::object());
  r.stats.host_adam_params = host_adam.value("params", int64_t{0});
  r.stats.host_adam_s = host_adam.value("seconds", 0.0);
  if (line.contains("eval_loss") && line.at("eval_loss").is_number())
    r.eval =
        StepEval{line.at("eval_loss").get<double>(), line.value("eval_loss_tokens", int64_t{0}),
                 line.value("time", nlohmann::json::object()).value("eval_s", 0.0)};
  return r;
}

namespace {

// Rewrites a metrics file keeping only the lines of steps <= last_step (temporary file, rename).
// Returns the lines kept, by step (a line repeated keeps its last copy).
std::map<int64_t, nlohmann::json> keep_steps_through(const std::string& path, int64_t last_step) {
  std::map<int64_t, nlohmann::json> kept;
  std::ifstream in(path);
  if (!in.good()) return kept;  // nothing logged yet
  std::string text, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = parse_json(line, "metrics.jsonl");
    } catch (const Error&) {
      break;  // a line cut short by the crash: it and anything after it go
    }
    const int64_t step = j.value("step", int64_t{0});
    if (step > last_step) continue;
    text += line + "\n";
    kept[step] = std::move(j);
  }
  in.close();
  const std::string tmp = temp_sibling(path);
  write_text_file(tmp, text);
  ZT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
           "cannot rename '" + tmp + "' to '" + path + "'");
  return kept;
}

// The steps of [1, last] that `kept` lacks, as "a" or "a-b" ranges.
std::vector<std::string> missing_ranges(const std::map<int64_t, nlohmann::json>& kept,
                                        int64_t last) {
  std::vector<std::string> out;
  for (int64_t s = 1; s <= last; ++s) {
    if (kept.count(s)) continue;
    int64_t e = s;
    while (e + 1 <= last && !kept.count(e + 1)) ++e;
    out.push_back(s == e ? std::to_string(s) : std::to_string(s) + "-" + std::to_string(e));
    s = e;
  }
  return out;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, int64_t resume_after_step,
                       const nlohmann::json& resumed_line)
    : path_(path) {
  std::map<int64_t, nlohmann::json> kept;
  if (resume_after_step >= 0) kept = keep_steps_through(path, resume_after_step);
  out_.open(path, resume_after_step >= 0 ? std::ios::app : std::ios::trunc);
  ZT_CHECK(out_.good(), "cannot create metrics file '" + path + "'");
  if (resume_after_step >= 0 && !kept.count(resume_after_step) && resumed_line.is_object()) {
    out_ << resumed_line.dump() << '\n';
    out_.flush();
    ZT_CHECK(out_.good(), "cannot write metrics file '" + path_ + "'");
    kept[resume_after_step] = resumed_line;
  }
  if (resume_after_step > 0) missing_ = missing_ranges(kept, resume_after_step);
  for (auto& [step, line] : kept) earlier_.push_back(std::move(line));
}

void MetricsLog::append(const StepRecord& record) {
  if (!out_.is_open()) return;
  out_ << record.to_json().dump() << '\n';
  out_.flush();
  ZT_CHECK(out_.good(), "cannot write metrics file '" + path_ + "'");
}

}  // namespace zt

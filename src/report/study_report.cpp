#include "report/study_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "engine/activation_checkpointing.h"
#include "engine/engine_spec_json.h"
#include "engine/estimator.h"
#include "io/fs_util.h"
#include "model/config.h"
#include "report/metrics_log.h"
#include "report/step_timeline.h"
#include "report/svg_plot.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

// A metrics line's number, NaN when it is missing or null (the loss of a skipped fp16 step whose
// forward overflowed).
double metric_or_nan(const nlohmann::json& line, const char* key) {
  const auto it = line.find(key);
  return it != line.end() && it->is_number() ? it->get<double>() : NAN;
}

namespace fs = std::filesystem;

// The measured categories, in report order (MemoryTracker's names).
const char* const kMemoryCategories[] = {"params",  "grads", "optimizer", "activations",
                                         "buffers", "host",  "nvme"};

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

double mib(double bytes) {
  return bytes / (1024.0 * 1024.0);
}

// Mean of a numeric metrics field over the steps after each process's first (the first
// step's when there is no other).
std::optional<double> mean_after_first(const std::vector<nlohmann::json>& metrics,
                                       const char* key) {
  // Over the steps after each process's first; over every step when none is (1-step runs).
  for (const bool skip_firsts : {true, false}) {
    double sum = 0;
    int n = 0;
    for (size_t i = 0; i < metrics.size(); ++i) {
      if (skip_firsts && (i == 0 || StepRecord::first_of_process_in(metrics[i]))) continue;
      const auto it = metrics[i].find(key);
      if (it == metrics[i].end() || !it->is_number()) continue;
      sum += it->get<double>();
      ++n;
    }
    if (n > 0) return sum / n;
  }
  return std::nullopt;
}

// The engine of a run.json written before it recorded its "engine": rebuilt from the options it
// recorded (its model's LoRA adapters included, but every tensor training, and without offload's
// finer settings).
EngineSpec engine_of_older_run(const RunData& r) {
  const nlohmann::json& c = r.run.at("config");
  EngineSpec spec;
  spec.model = ModelConfig::from_hf_json(r.run.at("model"), r.dir + "/run.json");
  ZeroConfig& zero = spec.zero;
  zero.stage = c.at("zero_stage").get<int>();
  zero.reduce_bucket_size = c.value("reduce_bucket_size", zero.reduce_bucket_size);
  zero.allgather_bucket_size = c.value("allgather_bucket_size", zero.allgather_bucket_size);
  zero.prefetch_bucket_size = c.value("prefetch_bucket_size", zero.prefetch_bucket_size);
  zero.param_persistence_threshold =
      c.value("param_persistence_threshold", zero.param_persistence_threshold);
  zero.max_live_parameters = c.value("max_live_parameters", zero.max_live_parameters);
  zero.max_reuse_distance = c.value("max_reuse_distance", zero.max_reuse_distance);
  zero.overlap_comm = c.value("overlap_comm", zero.overlap_comm);
  zero.world_invariant = c.value("world_invariant", zero.world_invariant);
  spec.ac = parse_activation_checkpointing(c.value("activation_checkpointing", std::string("none")),
                                           c.value("cpu_checkpointing", false));
  OffloadConfig& offload = spec.offload;
  offload.optimizer =
      parse_offload_device(c.value("offload_optimizer", "none"), "offload_optimizer");
  offload.param = parse_offload_device(c.value("offload_param", "none"), "offload_param");
  offload.nvme_path = c.value("nvme_path", std::string());
  offload.buffer_count = c.value("offload_buffer_count", offload.buffer_count);
  offload.sub_group_size = c.value("sub_group_size", offload.sub_group_size);
  spec.precision = parse_precision(c.value("precision", "bf16"));
  spec.micro_batch = c.at("micro_batch").get<int64_t>();
  spec.seq_len = c.at("seq_len").get<int64_t>();
  spec.grad_accum = c.value("grad_accum", int64_t{1});
  spec.activation_storage =
      parse_activation_storage(c.value("activations", std::string("fp32")), "config.activations");
  return spec;
}

// The estimator's per-category prediction for the engine the run built (null when the run.json
// lacks what it needs; a recorded engine that cannot be read is also said on stderr).
nlohmann::json estimate_for(const RunData& r) {
  try {
    const EngineSpec spec = r.run.contains("engine")
                                ? engine_spec_from_json(r.run.at("engine"), r.dir + "/run.json")
                                : engine_of_older_run(r);
    const int world = r.run.at("world_size").get<int>();
    spec.validate(world);  // a run.json is read, not trusted
    const MemoryEstimate e = estimate_memory(spec, world);
    nlohmann::json by_category = nlohmann::json::object();
    for (int c = 0; c < kNumMemCategories; ++c)
      by_category[mem_category_name(static_cast<MemCategory>(c))] =
          e.of(static_cast<MemCategory>(c));
    return by_category;
  } catch (const std::exception& e) {
    if (r.run.contains("engine"))
      std::cerr << "zerotrain report: warning: no memory estimate for " << r.dir << ": " << e.what()
                << "\n";
    return nullptr;
  }
}

// The lines of the steps run at run.json's world size and ZeRO stage: a resumed run's earlier
// steps at another layout are left out (a line without one, from an older release, is kept).
std::vector<nlohmann::json> steps_at_layout(const std::vector<nlohmann::json>& metrics, int ranks,
                                            int stage) {
  std::vector<nlohmann::json> kept;
  for (const nlohmann::json& m : metrics)
    if (StepRecord::from_json(m).ran_at(ranks, stage)) kept.push_back(m);
  return kept;
}

// "d64 L2 H4/2 V256 (0.46M)" from run.json's model config and parameter count.
std::string model_label(const nlohmann::json& run) {
  const nlohmann::json m = run.value("model", nlohmann::json::object());
  const auto n = [&](const char* key) { return std::to_string(m.value(key, int64_t{0})); };
  std::string label = "d" + n("hidden_size") + " L" + n("num_hidden_layers") + " H" +
                      n("num_attention_heads") + "/" + n("num_key_value_heads") + " V" +
                      n("vocab_size");
  if (run.contains("parameters") && run["parameters"].is_number())
    label += " (" + fixed(run["parameters"].get<double>() / 1e6, 2) + "M)";
  return label;
}

ScalingRow row_of(const RunData& r) {
  const nlohmann::json& c = r.run.at("config");
  ScalingRow row;
  row.dir = r.dir;
  row.run = fs::path(r.dir).filename().string();
  if (row.run.empty()) row.run = fs::path(r.dir).parent_path().filename().string();
  row.model = model_label(r.run);
  row.stage = c.value("zero_stage", 0);
  row.ranks = r.run.value("world_size", 1);
  row.micro_batch = c.value("micro_batch", int64_t{0});
  row.grad_accum = c.value("grad_accum", int64_t{0});
  row.seq_len = c.value("seq_len", int64_t{0});
  row.checkpointing = c.value("activation_checkpointing", std::string("none"));
  row.precision = c.value("precision", std::string("bf16"));
  row.comparison = r.run.value("backend", std::string()) + " " +
                   r.run.value("model", nlohmann::json::object()).dump() + " T" +
                   std::to_string(row.seq_len) + " B" + std::to_string(row.micro_batch) + "x" +
                   std::to_string(row.grad_accum) + " " + row.checkpointing + " " + row.precision +
                   " " + c.value("offload_optimizer", std::string("none")) + "/" +
                   c.value("offload_param", std::string("none"));
  const std::vector<nlohmann::json> here = steps_at_layout(r.metrics, row.ranks, row.stage);
  row.tokens_per_s = mean_after_first(here, "tokens_per_s").value_or(0.0);
  row.tokens_per_s_per_rank = row.tokens_per_s / std::max(1, row.ranks);
  row.mfu = mean_after_first(here, "mfu");
  row.measured_memory = nlohmann::json::object();
  for (const char* cat : kMemoryCategories) row.measured_memory[cat] = 0;
  for (const auto& m : here)  // rank 0's per-step peaks
    for (const char* cat : kMemoryCategories)
      if (m.contains("peak_memory_bytes") && m["peak_memory_bytes"].contains(cat))
        row.measured_memory[cat] = std::max(row.measured_memory[cat].get<uint64_t>(),
                                            m["peak_memory_bytes"][cat].get<uint64_t>());
  if (r.report.is_object() && r.report.contains("peak_memory_bytes_per_rank"))
    for (const auto& rank : r.report["peak_memory_bytes_per_rank"])  // every rank, whole run
      for (const char* cat : kMemoryCategories)
        if (rank.contains(cat))
          row.measured_memory[cat] =
              std::max(row.measured_memory[cat].get<uint64_t>(), rank[cat].get<uint64_t>());
  row.estimated_memory = estimate_for(r);
  uint64_t bytes = 0;
  int steps = 0;
  for (const auto& m : here) {
    if (!m.contains("comm_bytes")) continue;
    for (const auto& [op, b] : m["comm_bytes"].items()) bytes += b.get<uint64_t>();
    ++steps;
  }
  row.comm_bytes_per_step = steps > 0 ? bytes / static_cast<uint64_t>(steps) : 0;
  row.final_loss = r.metrics.empty() ? 0.0 : metric_or_nan(r.metrics.back(), "loss");
  for (const auto& m : r.metrics)
    row.last_step = std::max(row.last_step, m.value("step", int64_t{0}));
  row.planned_steps = c.value("steps", int64_t{0});
  row.finished = r.report.is_object() && row.last_step >= row.planned_steps;
  if (r.report.is_object() && r.report.contains("eval") && r.report["eval"].is_object()) {
    const nlohmann::json& eval = r.report["eval"];
    row.eval_loss = metric_or_nan(eval, "loss");
    // W·T tokens (reports written before the "windows" key have only these).
    row.eval_windows = row.seq_len > 0 ? eval.value("tokens", int64_t{0}) / row.seq_len : 0;
    row.eval_data = eval.value("data", std::string());
  }
  return row;
}

std::string memory_cell(const ScalingRow& row, const char* cat) {
  std::string cell = fixed(mib(row.measured_memory.value(cat, 0.0)), 2);
  if (row.estimated_memory.is_object())
    cell += " / " + fixed(mib(row.estimated_memory.value(cat, 0.0)), 2);
  return cell;
}

// A note under the table when the rows' end-of-training evaluations did not score the same
// windows (count and length) of the same file, as its path was given: their losses are then not
// comparable.
std::string eval_windows_note(const std::vector<ScalingRow>& rows) {
  std::set<std::tuple<int64_t, int64_t, std::string>> scored;
  for (const auto& r : rows)
    if (r.eval_loss) scored.insert({r.eval_windows, r.seq_len, r.eval_data});
  if (scored.size() < 2) return "";
  return " **The eval losses are not comparable:** the runs scored different windows or files "
         "(`--eval-batches K` scores K·N·B windows, which change with the ranks; "
         "`--eval-batches all` scores every window of the set at any world size).";
}

}  // namespace

RunData load_run_dir(const std::string& dir) {
  ZT_CHECK(fs::is_directory(dir), "report: '" + dir + "' is not a directory");
  ZT_CHECK(!fs::is_empty(dir), "report: '" + dir + "' is empty (not a zerotrain run directory)");
  for (const char* f : {"run.json", "metrics.jsonl"})
    ZT_CHECK(fs::exists(fs::path(dir) / f),
             "report: '" + dir + "' has no " + f + " (not a zerotrain train output directory)");
  RunData r;
  r.dir = dir;
  r.run = read_json_file(dir + "/run.json");
  ZT_CHECK(
      r.run.is_object() && r.run.contains("config") && r.run.contains("world_size"),
      "report: '" + dir + "/run.json' lacks config/world_size (not written by zerotrain train)");
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    r.metrics.push_back(
        parse_json(line, "report: '" + dir + "/metrics.jsonl' line " + std::to_string(line_no)));
  }
  ZT_CHECK(!r.metrics.empty(), "report: '" + dir + "/metrics.jsonl' has no steps");
  if (fs::exists(fs::path(dir) / "report.json")) r.report = read_json_file(dir + "/report.json");
  return r;
}

namespace {

// Two runs of one directory name (a/run, b/run) are told apart by their parents' names.
void name_runs_apart(std::vector<ScalingRow>& rows) {
  std::map<std::string, int> uses;
  for (const auto& row : rows) ++uses[row.run];
  for (auto& row : rows)
    if (uses[row.run] > 1) {
      const fs::path dir = fs::path(row.dir).filename().empty() ? fs::path(row.dir).parent_path()
                                                                : fs::path(row.dir);
      row.run = (dir.parent_path().filename() / dir.filename()).string();
    }
}

}  // namespace

std::vector<ScalingRow> scaling_rows(const std::vector<RunData>& runs) {
  std::vector<ScalingRow> rows;
  for (const auto& r : runs) rows.push_back(row_of(r));
  name_runs_apart(rows);
  std::stable_sort(rows.begin(), rows.end(), [](const ScalingRow& a, const ScalingRow& b) {
    return std::tie(a.stage, a.model, a.seq_len, a.micro_batch, a.grad_accum, a.comparison,
                    a.ranks) < std::tie(b.stage, b.model, b.seq_len, b.micro_batch, b.grad_accum,
                                        b.comparison, b.ranks);
  });
  // Baseline per stage and comparison: its run of the fewest ranks (first in order).
  std::map<std::pair<int, std::string>, const ScalingRow*> baseline;
  for (const auto& row : rows)  // a run without a figure (no step at its layout) is no baseline
    if (row.tokens_per_s > 0) baseline.emplace(std::make_pair(row.stage, row.comparison), &row);
  for (auto& row : rows) {
    const auto base = baseline.find({row.stage, row.comparison});
    if (base == baseline.end()) continue;
    row.baseline_ranks = base->second->ranks;
    row.efficiency = row.tokens_per_s_per_rank / base->second->tokens_per_s_per_rank;
  }
  return rows;
}

namespace {

// A note when the rows are not one comparison (other models, sequence lengths, batch shapes,
// ...): their throughputs compare only within each, as the efficiency column does.
std::string comparisons_note(const std::vector<ScalingRow>& rows) {
  std::set<std::string> comparisons;
  for (const auto& r : rows) comparisons.insert(r.comparison);
  if (comparisons.size() < 2) return "";
  return " **The runs are " + std::to_string(comparisons.size()) +
         " comparisons:** they differ in the backend, model, sequence length, micro-batch, "
         "grad-accum, "
         "checkpointing, precision or offload; tokens/s compare only within one, and each row's "
         "efficiency is against its own.";
}

// A note naming the runs that did not finish (a preempted or killed sweep task looks like any
// other row): their figures cover the steps they ran.
std::string unfinished_note(const std::vector<ScalingRow>& rows) {
  std::string runs;
  for (const auto& r : rows) {
    if (r.finished) continue;
    runs += (runs.empty() ? "" : ", ") + r.run + " (step " + std::to_string(r.last_step) +
            (r.planned_steps > 0 ? " of " + std::to_string(r.planned_steps) : std::string()) +
            (r.last_step >= r.planned_steps ? ", no report.json" : "") + ")";
  }
  if (runs.empty()) return "";
  return " **Unfinished runs:** " + runs +
         ": stopped, killed or still running; their figures cover the steps they ran, and a run "
         "resumed to its end gives them anew.";
}

}  // namespace

std::string scaling_table_markdown(const std::vector<ScalingRow>& rows) {
  std::ostringstream md;
  md << "| run | model | stage | ranks | seq-len | micro-batch | grad-accum | checkpointing | "
        "tokens/s | tokens/s per rank | scaling efficiency | MFU | comm bytes/step/rank | eval "
        "loss (windows) |";
  for (const char* cat : kMemoryCategories) md << " " << cat << " MiB |";
  md << "\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";
  for (size_t i = 0; i < std::size(kMemoryCategories); ++i) md << "---|";
  md << "\n";
  bool estimated = false;
  for (const auto& r : rows) {
    estimated = estimated || r.estimated_memory.is_object();
    md << "| " << r.run << (r.finished ? "" : " (unfinished)") << " | " << r.model << " | "
       << r.stage << " | " << r.ranks << " | " << r.seq_len << " | " << r.micro_batch << " | "
       << r.grad_accum << " | " << r.checkpointing << " | " << fixed(r.tokens_per_s, 1) << " | "
       << fixed(r.tokens_per_s_per_rank, 1) << " | "
       << (r.efficiency ? fixed(*r.efficiency, 3) + " (vs " + std::to_string(r.baseline_ranks) +
                              " rank" + (r.baseline_ranks == 1 ? "" : "s") + ")"
                        : std::string("n/a"))
       << " | " << (r.mfu ? fixed(*r.mfu, 4) : std::string("n/a (CPU)")) << " | "
       << r.comm_bytes_per_step << " | "
       << (r.eval_loss ? fixed(*r.eval_loss, 4) + " (" + std::to_string(r.eval_windows) + ")"
                       : std::string("n/a"))
       << " |";
    for (const char* cat : kMemoryCategories) md << " " << memory_cell(r, cat) << " |";
    md << "\n";
  }
  md << "\nMemory cells: peak MiB per rank (largest over ranks)"
     << (estimated ? " / estimate of engine/estimator.h for the same configuration."
                   : "; measured only (no estimate available).")
     << " Scaling efficiency: tokens/s per rank relative to the run of the fewest ranks with the "
        "same stage, backend, model, sequence length, micro-batch, grad-accum, checkpointing, "
        "precision and offload (1 rank where there is one). Tokens/s: the mean over each "
        "process's steps after its first (every step where each is some process's first). MFU is "
        "n/a on the CPU backend (no meaningful "
        "peak). Eval loss: report.json's end-of-training evaluation and the windows it scored."
     << eval_windows_note(rows) << comparisons_note(rows) << unfinished_note(rows) << "\n";
  return md.str();
}

namespace {

// A CSV field in quotes, its own quotes doubled.
std::string csv_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

}  // namespace

std::string scaling_table_csv(const std::vector<ScalingRow>& rows) {
  std::ostringstream csv;
  csv << "run,stage,ranks,micro_batch,grad_accum,seq_len,checkpointing,tokens_per_s,"
         "tokens_per_s_per_rank,scaling_efficiency,baseline_ranks,mfu,comm_bytes_per_step,"
         "final_loss,eval_loss,eval_windows";
  for (const char* cat : kMemoryCategories) csv << ",peak_" << cat << "_bytes";
  for (const char* cat : kMemoryCategories) csv << ",estimated_" << cat << "_bytes";
  csv << ",model,precision,dir,last_step,planned_steps,finished\n";
  for (const auto& r : rows) {
    csv << r.run << "," << r.stage << "," << r.ranks << "," << r.micro_batch << "," << r.grad_accum
        << "," << r.seq_len << "," << r.checkpointing << "," << fixed(r.tokens_per_s, 3) << ","
        << fixed(r.tokens_per_s_per_rank, 3) << "," << (r.efficiency ? fixed(*r.efficiency, 4) : "")
        << "," << r.baseline_ranks << "," << (r.mfu ? fixed(*r.mfu, 6) : "") << ","
        << r.comm_bytes_per_step << "," << fixed(r.final_loss, 6) << ","
        << (r.eval_loss ? fixed(*r.eval_loss, 6) : "") << ","
        << (r.eval_loss ? std::to_string(r.eval_windows) : "");
    for (const char* cat : kMemoryCategories) csv << "," << r.measured_memory.value(cat, 0);
    for (const char* cat : kMemoryCategories)
      csv << ","
          << (r.estimated_memory.is_object() ? std::to_string(r.estimated_memory.value(cat, 0))
                                             : std::string());
    csv << "," << csv_quoted(r.model) << "," << r.precision << "," << csv_quoted(r.dir) << ","
        << r.last_step << "," << r.planned_steps << "," << (r.finished ? "true" : "false") << "\n";
  }
  return csv.str();
}

namespace {

// scaling.json's row: every column of scaling.csv.
nlohmann::json row_json(const ScalingRow& r) {
  return {{"run", r.run},
          {"dir", r.dir},
          {"model", r.model},
          {"stage", r.stage},
          {"ranks", r.ranks},
          {"seq_len", r.seq_len},
          {"micro_batch", r.micro_batch},
          {"grad_accum", r.grad_accum},
          {"checkpointing", r.checkpointing},
          {"precision", r.precision},
          {"tokens_per_s", r.tokens_per_s},
          {"tokens_per_s_per_rank", r.tokens_per_s_per_rank},
          {"scaling_efficiency", r.efficiency ? nlohmann::json(*r.efficiency) : nullptr},
          {"baseline_ranks", r.baseline_ranks},
          {"mfu", r.mfu ? nlohmann::json(*r.mfu) : nullptr},
          {"peak_memory_bytes", r.measured_memory},
          {"estimated_memory_bytes", r.estimated_memory},
          {"comm_bytes_per_step", r.comm_bytes_per_step},
          {"final_loss", r.final_loss},
          {"last_step", r.last_step},
          {"planned_steps", r.planned_steps},
          {"finished", r.finished},
          {"eval", r.eval_loss ? nlohmann::json{{"loss", *r.eval_loss},
                                                {"windows", r.eval_windows},
                                                {"data", r.eval_data}}
                               : nlohmann::json(nullptr)}};
}

// Tokens/s against ranks, one line per stage and comparison (named by what tells them apart
// when the rows are several comparisons).
LinePlot throughput_plot(const std::vector<ScalingRow>& rows) {
  std::set<std::string> comparisons;
  for (const auto& r : rows) comparisons.insert(r.comparison);
  LinePlot throughput{"Throughput vs ranks", "ranks", "tokens/s", true, true, {}};
  std::map<std::pair<int, std::string>, PlotSeries> lines;
  for (const auto& r : rows) {
    PlotSeries& s = lines[{r.stage, r.comparison}];
    s.label = "ZeRO-" + std::to_string(r.stage);
    if (comparisons.size() > 1)
      s.label += " " + r.model + " T" + std::to_string(r.seq_len) + " mb" +
                 std::to_string(r.micro_batch) + "x" + std::to_string(r.grad_accum) + " " +
                 r.checkpointing + " " + r.precision;
    s.x.push_back(r.ranks);
    s.y.push_back(r.tokens_per_s);
  }
  for (auto& [key, s] : lines) throughput.series.push_back(s);
  return throughput;
}

}  // namespace

std::vector<std::string> write_study_report(const std::vector<RunData>& runs,
                                            const std::string& out_dir) {
  ZT_CHECK(!out_dir.empty(), "report: the output path is empty (--out '')");
  std::error_code ec;
  ZT_CHECK(!fs::exists(out_dir, ec) || fs::is_directory(out_dir, ec),
           "report: output path '" + out_dir + "' (--out) exists and is not a directory");
  fs::create_directories(out_dir, ec);
  ZT_CHECK(!ec,
           "report: cannot create the output directory '" + out_dir + "' (--out): " + ec.message());
  const std::vector<ScalingRow> rows = scaling_rows(runs);
  std::vector<std::string> written;
  auto write = [&](const std::string& name, const std::string& text) {
    write_text_file(out_dir + "/" + name, text);
    written.push_back(out_dir + "/" + name);
  };
  nlohmann::json table = nlohmann::json::array();
  for (const auto& r : rows) table.push_back(row_json(r));
  write("throughput_vs_ranks.svg", render_svg(throughput_plot(rows)));

  BarChart memory{"Peak memory per rank by run", "MiB", {}, {}};
  for (const char* cat : kMemoryCategories) memory.series.push_back({cat, {}, {}});
  for (const auto& r : rows) {
    memory.categories.push_back(r.run);
    for (size_t c = 0; c < std::size(kMemoryCategories); ++c)
      memory.series[c].y.push_back(mib(r.measured_memory.value(kMemoryCategories[c], 0.0)));
  }

  LinePlot losses{"Loss curves", "step", "loss", false, false, {}};
  for (const auto& run : runs) {
    const auto row = std::find_if(rows.begin(), rows.end(),
                                  [&](const ScalingRow& r) { return r.dir == run.dir; });
    PlotSeries s{row != rows.end() ? row->run : run.dir, {}, {}};
    for (const auto& m : run.metrics) {
      s.x.push_back(m.value("step", 0.0));
      s.y.push_back(metric_or_nan(m, "loss"));
    }
    losses.series.push_back(s);
  }

  write("scaling.md", "# zerotrain scaling study\n\n" + scaling_table_markdown(rows) +
                          "\n![throughput](throughput_vs_ranks.svg)\n![memory](memory_per_rank.svg)"
                          "\n![loss](loss_curves.svg)\n");
  write("scaling.csv", scaling_table_csv(rows));
  write("scaling.json", table.dump(2) + "\n");
  write("memory_per_rank.svg", render_svg(memory));
  write("loss_curves.svg", render_svg(losses));
  return written;
}

std::string write_run_plots(const std::vector<nlohmann::json>& metrics,
                            const std::string& out_dir) {
  LinePlot loss{"Training loss", "step", "loss", false, false, {{"loss", {}, {}}}};
  PlotSeries eval_loss{"eval_loss", {}, {}};  // the steps --eval-every evaluated after
  LinePlot time{"Step time breakdown", "step", "seconds", false, false, {}};
  const char* const phases[] = {"forward_s",   "backward_s", "optimizer_s",
                                "comm_wait_s", "data_s",     "checkpoint_s"};
  time.series.push_back({"step", {}, {}});
  for (const char* p : phases) time.series.push_back({std::string(p, std::strlen(p) - 2), {}, {}});
  for (const auto& m : metrics) {
    const double step = m.value("step", 0.0);
    loss.series[0].x.push_back(step);
    loss.series[0].y.push_back(metric_or_nan(m, "loss"));
    if (m.contains("eval_loss")) {
      eval_loss.x.push_back(step);
      eval_loss.y.push_back(metric_or_nan(m, "eval_loss"));
    }
    time.series[0].x.push_back(step);
    time.series[0].y.push_back(m.value("step_time_s", NAN));
    for (size_t p = 0; p < std::size(phases); ++p) {
      time.series[p + 1].x.push_back(step);
      time.series[p + 1].y.push_back(m.contains("time") ? m["time"].value(phases[p], NAN) : NAN);
    }
  }
  if (!eval_loss.x.empty()) {  // the evaluations' points and seconds (0 in the other steps)
    loss.title = "Training and evaluation loss";
    loss.series.push_back(eval_loss);
    PlotSeries eval_s{"eval", time.series[0].x, {}};
    for (const auto& m : metrics)
      eval_s.y.push_back(m.contains("time") ? m["time"].value("eval_s", 0.0) : 0.0);
    time.series.push_back(eval_s);
  }
  write_text_file(out_dir + "/loss.svg", render_svg(loss));
  write_text_file(out_dir + "/step_time.svg", render_svg(time));
  return "\n## Plots\n\n![loss per step](loss.svg)\n\n![step time per step](step_time.svg)\n";
}

void add_plots_and_skew_to_report(const std::string& out_dir, const nlohmann::json& skew) {
  std::vector<nlohmann::json> metrics;
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) metrics.push_back(parse_json(line, out_dir + "/metrics.jsonl"));
  const std::string markdown = rank_skew_markdown(skew) + write_run_plots(metrics, out_dir);
  std::ofstream md(out_dir + "/report.md", std::ios::app);
  md << markdown;
  ZT_CHECK(md.good(), "cannot append to '" + out_dir + "/report.md'");
}

}  // namespace zt

#include "report/run_report.h"

#include <cblas.h>
#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "io/fs_util.h"

namespace zt {

namespace {

std::string compiler_version() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("gcc ") + __VERSION__;
#else
  return "unknown";
#endif
}

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "unknown";
  std::string s(buf, static_cast<size_t>(len));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string hdf5_library_version() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A resumed run whose earlier steps ran at another world size or ZeRO stage: which, and what the
// figures cover. Empty otherwise.
std::string other_layouts_markdown(const nlohmann::json& report) {
  const nlohmann::json others = report.value("steps_at_other_layouts", nlohmann::json::array());
  if (others.empty()) return "";
  std::ostringstream md;
  md << "Resumed at another layout: ";
  for (size_t i = 0; i < others.size(); ++i) {
    const int64_t first = others[i].value("first_step", int64_t{0});
    const int64_t last = others[i].value("last_step", int64_t{0});
    md << (i == 0 ? "" : "; ") << "step" << (first == last ? " " : "s ") << first
       << (first == last ? "" : "-" + std::to_string(last)) << " ran at world size "
       << others[i].value("world_size", 0) << ", ZeRO stage " << others[i].value("zero_stage", 0);
  }
  md << ". Their losses count above; the throughput, time and traffic figures cover the "
     << report.value("steps_in_figures", int64_t{0}) << " steps at world size "
     << report.value("world_size", 0) << ", stage " << report.value("zero_stage", 0)
     << ", and the peak memory this process's steps.\n\n";
  return md.str();
}

}  // namespace

nlohmann::json library_versions() {
  const char* blas = openblas_get_config();
  return {{"zerotrain", ZEROTRAIN_VERSION},
          {"mpi", mpi_library_version()},
          {"hdf5", hdf5_library_version()},
          {"hdf5_parallel", static_cast<bool>(ZEROTRAIN_HDF5_PARALLEL)},
          {"openblas", blas ? blas : "unknown"},
          {"compiler", compiler_version()}};
}

nlohmann::json run_json(const RunInfo& info) {
  return {{"version", ZEROTRAIN_VERSION},
          {"command", info.command},
          {"config", info.config},
          {"world_size", info.world_size},
          {"hostnames", info.hostnames},
          {"placement", info.placement},
          {"backend", info.backend},
          {"communicator", info.communicator},
          {"precision", info.precision},
          {"model", info.model},
          {"parameters", info.parameters},
          {"non_embedding_parameters", info.non_embedding_parameters},
          {"trainable_parameters", info.trainable_parameters},
          {"frozen_tensors", info.frozen_tensors},
          {"libraries", library_versions()}};
}

void RunSummary::add(const StepRecord& r, bool in_figures) {
  const bool warming_up = steps_ == 0 || r.first_of_process;
  if (steps_ == 0) first_loss_ = r.stats.loss;
  ++steps_;
  final_loss_ = r.stats.loss;
  tokens_seen_ = r.tokens_seen;
  flops_per_token_ = r.flops_per_token;
  if (r.eval) evals_.emplace_back(r.step, *r.eval);
  if (!in_figures) return;
  ++steps_in_figures_;
  if (!warming_up) {
    ++steps_in_means_;
    tokens_per_s_after_first_ += r.tokens_per_s;
    tflops_after_first_ += r.tflops_per_device;
    host_adam_params_after_first_ += r.stats.host_adam_params;
    host_adam_s_after_first_ += r.stats.host_adam_s;
  }
  train_time_s_ += r.step_time_s;
  for (size_t op = 0; op < comm_bytes_total_.size(); ++op)
    comm_bytes_total_[op] += r.comm_bytes[op];
  offload_bytes_total_ += r.offload_bytes();
}

nlohmann::json RunSummary::to_json(const std::vector<MemoryByCategory>& peak_memory_per_rank,
                                   double total_time_s) const {
  nlohmann::json j;
  j["steps"] = steps_;
  j["first_loss"] = steps_ > 0 ? nlohmann::json(first_loss_) : nlohmann::json(nullptr);
  j["final_loss"] = steps_ > 0 ? nlohmann::json(final_loss_) : nlohmann::json(nullptr);
  j["tokens_seen"] = tokens_seen_;
  j["flops_per_token"] = flops_per_token_;
  // A process's first step pays one-time costs (page faults, thread pools): not in the means.
  if (steps_in_means_ > 0) {
    j["mean_tokens_per_s"] = tokens_per_s_after_first_ / static_cast<double>(steps_in_means_);
    j["mean_tflops_per_device"] = tflops_after_first_ / static_cast<double>(steps_in_means_);
  } else {
    j["mean_tokens_per_s"] = nullptr;
    j["mean_tflops_per_device"] = nullptr;
  }
  BytesByCollective per_step{};
  for (size_t op = 0; op < per_step.size(); ++op)
    per_step[op] = steps_in_figures_ > 0
                       ? comm_bytes_total_[op] / static_cast<uint64_t>(steps_in_figures_)
                       : 0;
  j["comm_bytes_per_step"] = comm_bytes_json(per_step);
  j["comm_bytes_total"] = comm_bytes_json(comm_bytes_total_);
  j["offload_bytes_per_step"] =
      offload_bytes_json(offload_bytes_total_.divided_by(static_cast<uint64_t>(steps_in_figures_)));
  j["steps_in_figures"] = steps_in_figures_;
  if (host_adam_params_after_first_ > 0 && host_adam_s_after_first_ > 0)
    j["host_adam"] = {{"params", host_adam_params_after_first_},
                      {"seconds", host_adam_s_after_first_},
                      {"params_per_s", static_cast<double>(host_adam_params_after_first_) /
                                           host_adam_s_after_first_}};
  nlohmann::json memory = nlohmann::json::array();
  for (const auto& rank_peaks : peak_memory_per_rank) memory.push_back(memory_json(rank_peaks));
  j["peak_memory_bytes_per_rank"] = memory;
  j["train_time_s"] = train_time_s_;
  j["total_time_s"] = total_time_s;
  if (!evals_.empty()) {
    nlohmann::json history = nlohmann::json::array();
    const std::pair<int64_t, StepEval>* best = nullptr;  // the lowest; the earliest of equal
    for (const auto& entry : evals_) {
      const auto& [step, e] = entry;
      history.push_back({{"step", step}, {"loss", e.loss}, {"loss_tokens", e.loss_tokens}});
      if (std::isfinite(e.loss) && (!best || e.loss < best->second.loss)) best = &entry;
    }
    j["eval_history"] = history;
    if (best) j["eval_best"] = {{"step", best->first}, {"loss", best->second.loss}};
  }
  return j;
}

nlohmann::json gemm_tuning_json(const GemmTuningReport& tally) {
  return {{"shapes", tally.shapes},
          {"timed", tally.timed},
          {"replaced", tally.replaced},
          {"accumulating_in_place", tally.in_place},
          {"single_candidate", tally.single_candidate},
          {"unreproducible", tally.unreproducible},
          {"uninformative", tally.uninformative},
          {"candidates", tally.candidates},
          {"refused_other_summation", tally.refused_bits},
          {"not_run", tally.failed},
          {"saved_ms", tally.saved_ms}};
}

nlohmann::json attention_graphs_json(const AttentionGraphReport& graphs) {
  return {{"built", graphs.graphs_built},
          {"build_s", graphs.build_seconds},
          {"built_in_steps", graphs.built_in_steps()},
          {"build_s_in_steps", graphs.build_seconds_in_steps()},
          {"workspace_bytes", graphs.workspace_bytes}};
}

BackendTallies backend_tallies(const Backend& backend, const MicroBatchGraphs::Report* graphs) {
  BackendTallies tallies;
  if (graphs) {
    const bool on = graphs->off_reason.empty();
    tallies.fields["cuda_graphs"] = {{"on", on},
                                     {"off_reason", graphs->off_reason},
                                     {"recorded", graphs->recorded},
                                     {"replayed_micro_batches", graphs->replayed},
                                     {"eager_micro_batches", graphs->eager},
                                     {"dropped", graphs->dropped},
                                     {"failed_recordings", graphs->failed},
                                     {"last_failure", graphs->last_failure}};
    tallies.log_lines.push_back(
        "CUDA graphs: " + std::string(on ? "on" : "off (" + graphs->off_reason + ")") + ", " +
        std::to_string(graphs->replayed) + " micro-batches replayed, " +
        std::to_string(graphs->eager) + " op by op, " + std::to_string(graphs->recorded) +
        " recorded, " + std::to_string(graphs->dropped) + " dropped" +
        (graphs->failed > 0 ? ", " + std::to_string(graphs->failed) +
                                  " recording(s) failed (the last: " + graphs->last_failure + ")"
                            : std::string()));
  }
  if (const std::optional<GemmTuningReport> gemm = backend.gemm_tuning_report()) {
    tallies.fields["gemm_algorithms"] = gemm_tuning_json(*gemm);
    tallies.log_lines.push_back("GEMM algorithms: " + gemm->summary());
  }
  if (const std::optional<AttentionGraphReport> graphs = backend.attention_graph_report()) {
    tallies.fields["attention_graphs"] = attention_graphs_json(*graphs);
    tallies.log_lines.push_back("cuDNN attention graphs: " + std::to_string(graphs->graphs_built) +
                                " built in " + fixed(graphs->build_seconds, 2) + " s, " +
                                std::to_string(graphs->built_in_steps()) + " of them in steps (" +
                                fixed(graphs->build_seconds_in_steps(), 2) + " s); workspace " +
                                human_bytes(static_cast<double>(graphs->workspace_bytes)));
  }
  return tallies;
}

std::string report_markdown(const nlohmann::json& report) {
  auto num = [](const nlohmann::json& v, int digits) {
    return v.is_number() ? fixed(v.get<double>(), digits) : std::string("n/a");
  };
  std::ostringstream md;
  md << "# zerotrain run report\n\n";
  md << "| quantity | value |\n|---|---|\n";
  md << "| steps | " << report.value("steps", 0) << " |\n";
  md << "| first loss | " << num(report["first_loss"], 4) << " |\n";
  md << "| final loss | " << num(report["final_loss"], 4) << " |\n";
  md << "| tokens seen | " << report.value("tokens_seen", 0) << " |\n";
  md << "| mean tokens/s (steps after the first) | " << num(report["mean_tokens_per_s"], 1)
     << " |\n";
  md << "| mean TFLOP/s per device (steps after the first) | "
     << num(report["mean_tflops_per_device"], 4) << " |\n";
  if (report.contains("host_adam"))
    md << "| host CPU AdamW, rank 0 (million parameters/s, steps after the first) | "
       << num(report["host_adam"]["params_per_s"].get<double>() / 1e6, 1) << " |\n";
  if (report.contains("gemm_algorithms")) {
    const nlohmann::json& gemm = report["gemm_algorithms"];
    md << "| GEMM algorithms timed, rank 0 (shapes replaced of timed; ms saved) | "
       << gemm.value("replaced", 0) << " of " << gemm.value("timed", 0) << "; "
       << num(gemm["saved_ms"], 2) << " |\n";
  }
  if (report.contains("attention_graphs")) {
    const nlohmann::json& graphs = report["attention_graphs"];
    md << "| cuDNN attention graphs, rank 0 (built; build seconds; those in steps) | "
       << graphs.value("built", 0) << "; " << num(graphs["build_s"], 2) << "; "
       << graphs.value("built_in_steps", 0) << " in " << num(graphs["build_s_in_steps"], 2)
       << " s |\n";
  }
  md << "| training time (s) | " << num(report["train_time_s"], 2) << " |\n";
  md << "| total time (s) | " << num(report["total_time_s"], 2) << " |\n\n";
  md << other_layouts_markdown(report);

  md << "## Communication per step (bytes sent per rank)\n\n| collective | bytes |\n|---|---|\n";
  for (const auto& [op, bytes] : report["comm_bytes_per_step"].items())
    md << "| " << op << " | " << human_bytes(bytes.get<double>()) << " |\n";
  if (report.contains("offload_bytes_per_step")) {
    bool any = false;
    for (const auto& [what, bytes] : report["offload_bytes_per_step"].items())
      any = any || bytes.get<uint64_t>() > 0;
    if (any) {
      md << "\n## Offload traffic per step (bytes per rank)\n\n| transfer | bytes |\n|---|---|\n";
      for (const auto& [what, bytes] : report["offload_bytes_per_step"].items())
        md << "| " << what << " | " << human_bytes(bytes.get<double>()) << " |\n";
    }
  }

  if (report.contains("eval_history") || report.contains("eval")) {
    md << "\n## Evaluation (mean loss over the counted targets)\n\n| after step | loss |\n"
          "|---|---|\n";
    for (const nlohmann::json& e : report.value("eval_history", nlohmann::json::array()))
      md << "| " << e.value("step", 0) << " | " << num(e["loss"], 4) << " |\n";
    if (report.contains("eval"))
      md << "| end of training | " << num(report["eval"]["loss"], 4) << " |\n";
    if (report.contains("eval_best"))
      md << "\nLowest: after step " << report["eval_best"].value("step", 0) << " ("
         << num(report["eval_best"]["loss"], 4) << ").\n";
  }

  md << "\n## Peak memory per rank\n\n| rank |";
  const auto& ranks = report["peak_memory_bytes_per_rank"];
  std::vector<std::string> categories;
  if (!ranks.empty())
    for (const auto& [cat, bytes] : ranks[0].items()) categories.push_back(cat);
  for (const auto& c : categories) md << " " << c << " |";
  md << "\n|---|";
  for (size_t i = 0; i < categories.size(); ++i) md << "---|";
  md << "\n";
  for (size_t r = 0; r < ranks.size(); ++r) {
    md << "| " << r << " |";
    for (const auto& c : categories) md << " " << human_bytes(ranks[r][c].get<double>()) << " |";
    md << "\n";
  }
  return md.str();
}

void write_report_files(const std::string& out_dir, const nlohmann::json& report) {
  write_text_file(out_dir + "/report.json", report.dump(2) + "\n");
  write_text_file(out_dir + "/report.md", report_markdown(report));
}

}  // namespace zt

#include "report/step_timeline.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "io/fs_util.h"
#include "util/error.h"
#include "util/median.h"

namespace zt {

namespace {

constexpr size_t kFields = 10;  // doubles per StepPhases on the wire

void pack(const StepPhases& p, double* out) {
  const double values[kFields] = {static_cast<double>(p.step),
                                  p.start_s,
                                  p.step_s,
                                  p.data_s,
                                  p.forward_s,
                                  p.backward_s,
                                  p.optimizer_s,
                                  p.comm_wait_s,
                                  p.eval_s,
                                  p.checkpoint_s};
  std::copy(values, values + kFields, out);
}

StepPhases unpack(const double* in) {
  return {
      static_cast<int64_t>(in[0]), in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9]};
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::vector<std::vector<StepPhases>> StepTimeline::gather(Communicator& comm) const {
  const int world = comm.world_size();
  std::vector<double> mine(steps_.size() * kFields);
  for (size_t i = 0; i < steps_.size(); ++i) pack(steps_[i], &mine[i * kFields]);
  std::vector<double> all(mine.size() * static_cast<size_t>(world));
  if (!mine.empty()) comm.all_gather_blocking(mine.data(), all.data(), mine.size());
  std::vector<std::vector<StepPhases>> per_rank(static_cast<size_t>(world));
  for (size_t r = 0; r < per_rank.size(); ++r)
    for (size_t i = 0; i < steps_.size(); ++i)
      per_rank[r].push_back(unpack(&all[(r * steps_.size() + i) * kFields]));
  return per_rank;
}

nlohmann::json chrome_trace(const std::vector<std::vector<StepPhases>>& per_rank) {
  nlohmann::json events = nlohmann::json::array();
  auto us = [](double s) { return static_cast<int64_t>(s * 1e6 + 0.5); };
  auto span = [&](const std::string& name, const char* cat, double start, double dur, int rank,
                  int tid, int64_t step) {
    if (dur <= 0) return;
    events.push_back({{"name", name},
                      {"cat", cat},
                      {"ph", "X"},
                      {"ts", us(start)},
                      {"dur", std::max<int64_t>(1, us(dur))},
                      {"pid", rank},
                      {"tid", tid},
                      {"args", {{"step", step}}}});
  };
  const char* const threads[] = {"step", "compute", "comm wait", "eval, checkpoint"};
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const int rank = static_cast<int>(r);
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"args", {{"name", "rank " + std::to_string(rank)}}}});
    for (int t = 0; t < 4; ++t)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", rank},
                        {"tid", t},
                        {"args", {{"name", threads[t]}}}});
    for (const StepPhases& p : per_rank[r]) {
      span("step " + std::to_string(p.step), "step", p.start_s, p.step_s, rank, 0, p.step);
      double t = p.start_s;
      for (auto [name, dur] : {std::pair{"data", p.data_s},
                               {"forward", p.forward_s},
                               {"backward", p.backward_s},
                               {"optimizer", p.optimizer_s}}) {
        span(name, "phase", t, dur, rank, 1, p.step);
        t += dur;
      }
      // The wait is spread over backward and optimizer; shown ending where the optimizer ends.
      span("comm_wait", "comm", t - p.comm_wait_s, p.comm_wait_s, rank, 2, p.step);
      if (p.eval_s > 0) span("eval", "eval", p.start_s + p.step_s, p.eval_s, rank, 3, p.step);
      span("checkpoint", "checkpoint", p.start_s + p.step_s + p.eval_s, p.checkpoint_s, rank, 3,
           p.step);
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

std::vector<std::vector<StepPhases>> write_chrome_trace(const StepTimeline& timeline,
                                                        Communicator& comm,
                                                        const std::string& out_dir) {
  auto per_rank = timeline.gather(comm);
  if (comm.rank() == 0)
    write_text_file(out_dir + "/trace.json", chrome_trace(per_rank).dump() + "\n");
  return per_rank;
}

nlohmann::json rank_skew(const std::vector<std::vector<StepPhases>>& per_rank) {
  const size_t ranks = per_rank.size();
  const size_t steps = ranks ? per_rank[0].size() : 0;
  if (steps == 0) return nullptr;
  double ratio_sum = 0, worst_ratio = 0;
  int64_t worst_step = 0;
  std::vector<int64_t> slowest_count(ranks, 0);
  std::vector<double> mean_step(ranks, 0);
  for (size_t i = 0; i < steps; ++i) {
    std::vector<double> times(ranks);
    for (size_t r = 0; r < ranks; ++r) {
      times[r] = per_rank[r][i].step_s;
      mean_step[r] += times[r] / static_cast<double>(steps);
    }
    const size_t slowest =
        static_cast<size_t>(std::max_element(times.begin(), times.end()) - times.begin());
    ++slowest_count[slowest];
    const double med = median(times);
    const double ratio = med > 0 ? times[slowest] / med : 1.0;
    ratio_sum += ratio;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst_step = per_rank[slowest][i].step;
    }
  }
  const auto most = std::max_element(slowest_count.begin(), slowest_count.end());
  return {{"steps", steps},
          {"mean_slowest_over_median", ratio_sum / static_cast<double>(steps)},
          {"worst_slowest_over_median", worst_ratio},
          {"worst_step", worst_step},
          {"most_often_slowest_rank", most - slowest_count.begin()},
          {"times_slowest", *most},
          {"mean_step_time_s_per_rank", mean_step}};
}

std::string rank_skew_markdown(const nlohmann::json& skew) {
  if (!skew.is_object()) return "";
  std::ostringstream md;
  md << "\n## Rank skew (step time of the slowest rank vs the median)\n\n"
     << "| quantity | value |\n|---|---|\n"
     << "| mean slowest/median | " << fixed(skew["mean_slowest_over_median"].get<double>(), 3)
     << " |\n| worst slowest/median | " << fixed(skew["worst_slowest_over_median"].get<double>(), 3)
     << " (step " << skew["worst_step"].get<int64_t>() << ") |\n"
     << "| most often slowest | rank " << skew["most_often_slowest_rank"].get<int64_t>() << " ("
     << skew["times_slowest"].get<int64_t>() << " of " << skew["steps"].get<int64_t>()
     << " steps) |\n\n| rank | mean step time (s) |\n|---|---|\n";
  const auto& per_rank = skew["mean_step_time_s_per_rank"];
  for (size_t r = 0; r < per_rank.size(); ++r)
    md << "| " << r << " | " << fixed(per_rank[r].get<double>(), 4) << " |\n";
  md << "\nPhase timeline of every rank: trace.json (open in ui.perfetto.dev).\n";
  return md.str();
}

}  // namespace zt

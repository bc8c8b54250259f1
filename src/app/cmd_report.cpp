// zerotrain report RUN_DIRS... --out DIR: a scaling study over finished train output directories
// (report/study_report.h): scaling.md / scaling.csv / scaling.json and SVG plots in DIR.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "report/study_report.h"
#include "util/error.h"

namespace zt {

namespace {

// Whether `a` comes before `b` with runs of digits compared as numbers (sweep-1234_2 before
// sweep-1234_10), as `ls -v` orders them.
bool in_natural_order(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      na.erase(0, std::min(na.find_first_not_of('0'), na.size() - 1));
      nb.erase(0, std::min(nb.find_first_not_of('0'), nb.size() - 1));
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie, j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i, ++j;
  }
  return a.size() - i < b.size() - j;
}

// The run directories given: each as it is where it holds a run.json; else, a directory that
// holds run directories (a sweep's outputs/), those, in natural name order, with a note.
std::vector<std::string> expand_run_dirs(const std::vector<std::string>& given) {
  namespace fs = std::filesystem;
  std::vector<std::string> dirs;
  for (const std::string& dir : given) {
    std::error_code ec;
    std::vector<std::string> inside;
    if (!fs::exists(fs::path(dir) / "run.json", ec) && fs::is_directory(dir, ec))
      for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
        if (e.is_directory(ec) && fs::exists(e.path() / "run.json", ec))
          inside.push_back(e.path().string());
    if (inside.empty()) {
      dirs.push_back(dir);  // a run directory, or load_run_dir's error naming what it lacks
      continue;
    }
    std::sort(inside.begin(), inside.end(), in_natural_order);
    std::cerr << "report: '" << dir << "' holds " << inside.size() << " run director"
              << (inside.size() == 1 ? "y" : "ies") << " (a run.json each): reading them all\n";
    dirs.insert(dirs.end(), inside.begin(), inside.end());
  }
  return dirs;
}

}  // namespace

int cmd_report(int argc, char** argv) {
  std::vector<std::string> run_dirs;
  std::string out;
  po::options_description opts("report options");
  opts.add_options()(
      "runs", po::value(&run_dirs)->multitoken(),
      "train output directories (run.json, metrics.jsonl, report.json), or directories that "
      "hold them (a sweep's outputs)")("out", po::value(&out),
                                       "directory for scaling.md/.csv/.json and the SVG plots");
  po::positional_options_description positional;
  positional.add("runs", -1);
  const CommandSpec spec{"report",
                         "Scaling table and plots over train output directories (tokens/s, "
                         "efficiency, MFU, memory measured vs estimated, bytes per step).",
                         "zerotrain report (RUN_DIR | SWEEP_DIR)... --out DIR"};
  po::variables_map vm;
  if (!parse_command_line(spec, opts, &positional, argc, argv, vm)) return 0;
  require_option(vm, "out", "report");
  ZT_CHECK(!run_dirs.empty(), "report: give at least one run directory");
  std::vector<RunData> runs;
  for (const auto& dir : expand_run_dirs(run_dirs)) runs.push_back(load_run_dir(dir));
  for (const auto& file : write_study_report(runs, out)) std::cout << file << "\n";
  return 0;
}

}  // namespace zt

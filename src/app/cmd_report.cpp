// zerotrain report RUN_DIRS... --out DIR: a scaling study over finished train output directories
// (report/study_report.h): scaling.md / scaling.csv / scaling.json and SVG plots in DIR.
#include <iostream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "report/study_report.h"
#include "util/error.h"

namespace zt {

int cmd_report(int argc, char** argv) {
  std::vector<std::string> run_dirs;
  std::string out;
  po::options_description opts("report options");
  opts.add_options()("runs", po::value(&run_dirs)->multitoken(),
                     "train output directories (run.json, metrics.jsonl, report.json)")(
      "out", po::value(&out), "directory for scaling.md/.csv/.json and the SVG plots");
  po::positional_options_description positional;
  positional.add("runs", -1);
  const CommandSpec spec{"report",
                         "Scaling table and plots over train output directories (tokens/s, "
                         "efficiency, MFU, memory measured vs estimated, bytes per step).",
                         "zerotrain report RUN_DIR... --out DIR"};
  po::variables_map vm;
  if (!parse_command_line(spec, opts, &positional, argc, argv, vm)) return 0;
  require_option(vm, "out", "report");
  ZT_CHECK(!run_dirs.empty(), "report: give at least one run directory");
  std::vector<RunData> runs;
  for (const auto& dir : run_dirs) runs.push_back(load_run_dir(dir));
  for (const auto& file : write_study_report(runs, out)) std::cout << file << "\n";
  return 0;
}

}  // namespace zt

// The fused attention's graphs over a run, for its report (report.json's `attention_graphs`,
// report/run_report.h): how many were built, the seconds their builds took, and the cuDNN
// workspace held. cuDNN's plans are built at the first call of each graph's shape: a
// document-masked run may build some in later steps, whose times then include them.
#pragma once
#include <cstdint>

namespace zt {

struct AttentionGraphReport {
  int64_t graphs_built = 0;
  double build_seconds = 0;
  int64_t workspace_bytes = 0;
};

}  // namespace zt

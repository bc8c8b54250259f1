// The fused attention's graphs over a run, for its report (report.json's `attention_graphs`,
// report/run_report.h): how many were built and the seconds their builds took, in all and at
// start-up (CudnnAttention::prepare, before the first step), and the cuDNN workspace held. The
// builds after start-up happen inside steps: a document-masked run builds the graph of a call
// size at the first micro-batch that needs it, and that step's time includes the build.
#pragma once
#include <cstdint>

namespace zt {

struct AttentionGraphReport {
  int64_t graphs_built = 0;
  double build_seconds = 0;
  int64_t built_at_start = 0;  // of graphs_built, those prepare() built
  double build_seconds_at_start = 0;
  int64_t workspace_bytes = 0;

  int64_t built_in_steps() const { return graphs_built - built_at_start; }
  double build_seconds_in_steps() const { return build_seconds - build_seconds_at_start; }
};

}  // namespace zt

// The median of a set of measurements (the mean of the middle two for an even count; 0 for none):
// step times across ranks (report/step_timeline.h), a GEMM candidate's timed runs
// (backend/gemm_tuning.h).
#pragma once
#include <algorithm>
#include <vector>

namespace zt {

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t half = values.size() / 2;
  return values.size() % 2 == 1 ? values[half] : 0.5 * (values[half - 1] + values[half]);
}

}  // namespace zt

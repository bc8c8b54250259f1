// Shared by the token dataset tests: a dataset written by TokenDatasetWriter, then given one more
// dataset past the writer (as another tool might write it), to test what the reader accepts.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/data_loader.h"
#include "io/hdf5_util.h"
#include "io/token_dataset.h"

namespace zt::testing {

// `n` byte tokens (all 7) at `path`, then dataset `name` of `elements` values of `file_type`,
// written from `values` (in `memory_type`; null when elements is 0). Returns the path.
inline std::string token_dataset_with(const std::string& path, int64_t n, const std::string& name,
                                      DType file_type, DType memory_type, const void* values,
                                      int64_t elements) {
  {
    TokenDatasetWriter w(path, 256, "byte");
    const std::vector<uint32_t> tokens(static_cast<size_t>(n), 7);
    w.append(tokens.data(), n, "test");
    w.finish();
  }
  h5::Id file = h5::open_file(path, true);
  h5::Id d = h5::create_dataset(file, name, file_type, {elements}, path);
  if (elements > 0) h5::write_box(d, memory_type, {0}, {elements}, values, path);
  d.close(path);
  file.close(path);
  return path;
}

// One step of rank 1 of a 2-rank world and of one rank taking the same global batch: both
// samplers must count `expected` targets. Returns rank 1's windows, [micro][B], as `schedule`
// (the same order, stepped alongside) gives them.
inline std::vector<std::vector<int64_t>> step_both_samplers(WindowSchedule& schedule,
                                                            WindowSampler& rank1,
                                                            WindowSampler& alone,
                                                            int64_t expected) {
  auto windows = schedule.rank_windows(1);
  schedule.advance();
  rank1.next_step();
  alone.next_step();
  EXPECT_EQ(rank1.counted_targets(), expected);
  EXPECT_EQ(alone.counted_targets(), expected);
  return windows;
}

}  // namespace zt::testing

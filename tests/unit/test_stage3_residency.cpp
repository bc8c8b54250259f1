// Stage 3's residency policy (engine/stage3_residency.h), the one the gatherer executes and the
// estimator replays: gathers, prefetch bounds, persistence and reuse distance on a hand-made pass.
#include <gtest/gtest.h>

#include <vector>

#include "engine/stage3_residency.h"

namespace zt {
namespace {

// Four groups of 10, 100, 100 and 10 elements on one rank; the training pass uses 0 1 2 3 3 2 1 0.
Stage3Residency make(int64_t prefetch, int64_t persistence, int64_t reuse) {
  std::vector<GroupPartition> groups;
  for (int64_t n : {10, 100, 100, 10}) groups.push_back(GroupPartition::of(n, 1));
  ZeroConfig zero;
  zero.overlap_comm = true;
  zero.prefetch_bucket_size = prefetch;
  zero.param_persistence_threshold = persistence;
  zero.max_reuse_distance = reuse;
  zero.max_live_parameters = 1000;
  Stage3Residency r(groups, zero);
  r.begin_pass(Stage3Residency::training_pass(4, false));
  return r;
}

TEST(Stage3Residency, PrefetchesWithinTheBucketAndReleasesUnlessKept) {
  Stage3Residency r = make(/*prefetch=*/150, /*persistence=*/50, /*reuse=*/0);
  EXPECT_EQ(r.uses(), (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(r.gathers_for(0), (std::vector<int>{0, 1}));  // 10 + 100 in flight; 2 would exceed
  r.landed(0);
  EXPECT_TRUE(r.keep_after(0));                     // 10 < 50: persistent for the step
  EXPECT_EQ(r.gathers_for(1), std::vector<int>{});  // 1 is in flight; 100 + 100 > 150
  r.landed(1);
  EXPECT_FALSE(r.keep_after(1));  // next use after groups 2, 3: distance 110
  r.released(1);
  EXPECT_EQ(r.gathers_for(2), (std::vector<int>{2, 3}));
  EXPECT_EQ(r.live_elements(), 10 + 100 + 10);
  EXPECT_EQ(r.peak_live_elements(), 120);  // never 0, 1, 2 and 3 at once
  EXPECT_EQ(r.peak_in_flight_elements(), 110);
}

TEST(Stage3Residency, KeepsAGroupReusedWithinTheDistance) {
  Stage3Residency r = make(/*prefetch=*/1000, /*persistence=*/0, /*reuse=*/1'000);
  for (size_t i = 0; i < 3; ++i) {
    r.gathers_for(i);
    r.landed(r.uses()[i]);
  }
  EXPECT_TRUE(r.keep_after(2));   // group 2 is used again after group 3 only (10 elements)
  EXPECT_FALSE(r.keep_after(7));  // the pass's last use: nothing to keep it for
}

}  // namespace
}  // namespace zt

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

// DeepSpeed's rule: later groups are gathered while the elements in flight ahead of the use are
// below the bucket, checked before each one, so the bucket is passed by one group at most.
TEST(Stage3Residency, PrefetchesWhileTheElementsAheadAreBelowTheBucketAndReleasesUnlessKept) {
  Stage3Residency r = make(/*prefetch=*/150, /*persistence=*/50, /*reuse=*/0);
  EXPECT_EQ(r.uses(), (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(r.gathers_for(0), (std::vector<int>{0, 1, 2}));  // ahead 0, then 100 < 150, then 200
  r.landed(0);
  EXPECT_TRUE(r.keep_after(0));                        // 10 < 50: persistent for the step
  EXPECT_EQ(r.gathers_for(1), (std::vector<int>{3}));  // ahead: group 2's 100 < 150
  r.landed(1);
  EXPECT_FALSE(r.keep_after(1));  // next use after groups 2, 3: distance 110
  r.released(1);
  EXPECT_EQ(r.live_elements(), 10 + 100 + 10);
  EXPECT_EQ(r.gathers_for(2), (std::vector<int>{1}));  // ahead: group 3's 10; 1's next use
  EXPECT_EQ(r.live_elements(), 10 + 100 + 10 + 100);
  EXPECT_EQ(r.peak_live_elements(), 220);
  EXPECT_EQ(r.peak_in_flight_elements(), 210);  // groups 1, 2 and 3 before 1 landed
}

// max_live_parameters 0 (axolotl's stage 3 configs): DeepSpeed's coordinator prefetches at most
// max_live − live elements, so nothing, and zerotrain keeps no group for a reuse beyond that
// budget either: each group is gathered at its use and released after it unless persistent. The
// same pass with a budget prefetches and keeps.
TEST(Stage3Residency, NoLiveBudgetGathersEachGroupAtItsUseOnly) {
  auto pass = [](int64_t max_live) {
    ZeroConfig zero;
    zero.overlap_comm = true;
    zero.max_live_parameters = max_live;
    zero.max_reuse_distance = 1'000'000'000;
    zero.param_persistence_threshold = 0;
    zero.validate();
    Stage3Residency r({GroupPartition::of(10, 1), GroupPartition::of(100, 1)}, zero);
    r.begin_pass(Stage3Residency::training_pass(2, false));  // uses 0 1 1 0
    return r;
  };
  Stage3Residency none = pass(0);
  EXPECT_EQ(none.gathers_for(0), std::vector<int>{0});
  none.landed(0);
  EXPECT_FALSE(none.keep_after(0));  // used again after group 1: within the reuse distance
  none.released(0);
  EXPECT_EQ(none.gathers_for(1), std::vector<int>{1});
  EXPECT_EQ(none.peak_live_elements(), 100);
  Stage3Residency budget = pass(1000);
  EXPECT_EQ(budget.gathers_for(0), (std::vector<int>{0, 1}));
  budget.landed(0);
  EXPECT_TRUE(budget.keep_after(0));
}

// A group larger than the whole bucket (a 6b layer against DeepSpeed's default 5e7) is still
// prefetched, one at a time; no overlap: nothing ahead.
TEST(Stage3Residency, PrefetchesAGroupLargerThanTheBucketAlone) {
  Stage3Residency r = make(/*prefetch=*/50, /*persistence=*/0, /*reuse=*/0);
  EXPECT_EQ(r.gathers_for(0), (std::vector<int>{0, 1}));  // ahead 0 < 50: group 1 (100)
  r.landed(0);
  r.released(0);
  EXPECT_EQ(r.gathers_for(1), (std::vector<int>{2}));  // group 1 is this use's: ahead 0
  EXPECT_EQ(r.peak_in_flight_elements(), 200);
  ZeroConfig no_overlap;
  no_overlap.overlap_comm = false;
  Stage3Residency serial({GroupPartition::of(100, 1), GroupPartition::of(100, 1)}, no_overlap);
  serial.begin_pass(Stage3Residency::training_pass(2, false));
  EXPECT_EQ(serial.gathers_for(0), std::vector<int>{0});
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

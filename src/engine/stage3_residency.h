// Stage 3's parameter residency, as a pure policy (docs/ARCHITECTURE.md §4): which groups are
// gathered when, and when each is released. ParamGatherer executes it with real all-gathers;
// the memory estimator replays it on sizes alone, so the prediction and the engine follow the
// same rules by construction.
//
// Over a pass (the groups' uses in execution order, e.g. one micro-batch's forward then
// backward): before use i, its group is gathered unless resident, and with overlap the next
// groups are prefetched while the elements in flight ahead of use i are below
// stage3_prefetch_bucket_size (checked before each group, as DeepSpeed does: the bucket is
// exceeded by at most one group, and a group larger than the bucket is still prefetched alone)
// and the resident elements stay within stage3_max_live_parameters. After use i the group is kept
// if it is persistent (fewer elements than stage3_param_persistence_threshold: it stays for the
// step) or if its next use comes within stage3_max_reuse_distance elements of other groups while
// the live budget holds; otherwise it is released.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/engine_types.h"
#include "engine/zero_config.h"
#include "model/layout.h"

namespace zt {

class Stage3Residency {
 public:
  Stage3Residency(std::vector<GroupPartition> groups, const ZeroConfig& zero);

  // One micro-batch of training: forward over groups 0..G-1, then backward over G-1 down to
  // lowest_backward (0 unless the lower groups are frozen; G: a forward alone). Tied embeddings:
  // each use of the head group (G-1) is followed by a use of the embedding group (0) that the
  // engine acquires with it and releases with it.
  static std::vector<int> training_pass(int groups, bool tied_embeddings, int lowest_backward = 0);
  // The same pass over a layout's compute units (model/layout.h): forward over units 0..U-1, then
  // backward from U-1 down to lowest_backward (a unit; U: a forward alone), each entry the groups
  // that unit acquires together and releases together (ParamLayout::unit_groups: a layer and its
  // LoRA adapters, the head and the tied embedding). flatten() gives the pass's uses.
  static std::vector<std::vector<int>> unit_pass(const ParamLayout& layout, int lowest_backward);
  static std::vector<int> flatten(const std::vector<std::vector<int>>& units);

  void begin_pass(std::vector<int> uses);
  const std::vector<int>& uses() const { return uses_; }
  // Before use i: the groups to gather now, in order (uses[i]'s own group if it is not resident,
  // then the prefetches the bounds allow). From here on they are resident and in flight.
  std::vector<int> gathers_for(size_t i);
  // Group g's gather has been waited for: resident, no longer in flight.
  void landed(int g);
  bool in_flight(int g) const { return in_flight_[static_cast<size_t>(g)]; }
  bool resident(int g) const { return resident_[static_cast<size_t>(g)]; }
  // After use i: whether its group stays resident (persistent, or reused soon within budget).
  bool keep_after(size_t i) const;
  // Group g is released (its gather waited for first).
  void released(int g);

  int64_t live_elements() const { return live_; }
  int64_t peak_live_elements() const { return peak_live_; }
  int64_t peak_in_flight_elements() const { return peak_in_flight_; }

 private:
  void gather(int g, std::vector<int>& out);

  std::vector<GroupPartition> groups_;
  ZeroConfig zero_;
  std::vector<int> uses_;
  std::vector<bool> resident_, in_flight_;
  int64_t live_ = 0, in_flight_elements_ = 0, peak_live_ = 0, peak_in_flight_ = 0;
};

}  // namespace zt

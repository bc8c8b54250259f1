#include "engine/stage3_residency.h"

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

namespace zt {

Stage3Residency::Stage3Residency(std::vector<GroupPartition> groups, const ZeroConfig& zero)
    : groups_(std::move(groups)),
      zero_(zero),
      resident_(groups_.size(), false),
      in_flight_(groups_.size(), false) {}

namespace {

// Forward over units 0..units-1, backward from units-1 down to lowest_backward.
std::vector<std::vector<int>> pass_over_units(
    int units, int lowest_backward, const std::function<std::vector<int>(int)>& unit_groups) {
  std::vector<std::vector<int>> pass;
  for (int u = 0; u < units; ++u) pass.push_back(unit_groups(u));
  for (int u = units - 1; u >= lowest_backward; --u) pass.push_back(unit_groups(u));
  return pass;
}

}  // namespace

std::vector<int> Stage3Residency::training_pass(int groups, bool tied_embeddings,
                                                int lowest_backward) {
  const int head = groups - 1;
  return flatten(pass_over_units(groups, lowest_backward, [&](int g) {
    return tied_embeddings && g == head ? std::vector<int>{g, 0} : std::vector<int>{g};
  }));
}

std::vector<std::vector<int>> Stage3Residency::unit_pass(const ParamLayout& layout,
                                                         int lowest_backward) {
  return pass_over_units(layout.num_compute_units(), lowest_backward,
                         [&](int u) { return layout.unit_groups(u); });
}

std::vector<int> Stage3Residency::flatten(const std::vector<std::vector<int>>& units) {
  std::vector<int> uses;
  for (const auto& unit : units) uses.insert(uses.end(), unit.begin(), unit.end());
  return uses;
}

void Stage3Residency::begin_pass(std::vector<int> uses) {
  uses_ = std::move(uses);
}

void Stage3Residency::gather(int g, std::vector<int>& out) {
  const int64_t n = groups_[static_cast<size_t>(g)].padded;
  resident_[static_cast<size_t>(g)] = in_flight_[static_cast<size_t>(g)] = true;
  live_ += n;
  in_flight_elements_ += n;
  peak_live_ = std::max(peak_live_, live_);
  peak_in_flight_ = std::max(peak_in_flight_, in_flight_elements_);
  out.push_back(g);
}

std::vector<int> Stage3Residency::gathers_for(size_t i) {
  std::vector<int> out;
  const int g = uses_[i];
  if (!resident(g)) gather(g, out);
  if (!zero_.overlap_comm) return out;
  // Prefetch, as DeepSpeed's coordinator does: while the elements in flight ahead of this use
  // (the gathers of later groups not landed yet, not this group's own) are below the bucket, the
  // next group is gathered, so the bucket is exceeded by at most one group and a group larger than
  // the bucket (a 6b layer: 2e8 elements against the default 5e7) is still prefetched, alone.
  int64_t ahead = in_flight_elements_ - (in_flight(g) ? groups_[static_cast<size_t>(g)].padded : 0);
  for (size_t j = i + 1; j < uses_.size() && ahead < zero_.prefetch_bucket_size; ++j) {
    const int h = uses_[j];
    if (resident(h)) continue;
    const int64_t n = groups_[static_cast<size_t>(h)].padded;
    if (live_ + n > zero_.max_live_parameters) break;
    gather(h, out);
    ahead += n;
  }
  return out;
}

void Stage3Residency::landed(int g) {
  if (!in_flight(g)) return;
  in_flight_[static_cast<size_t>(g)] = false;
  in_flight_elements_ -= groups_[static_cast<size_t>(g)].padded;
}

bool Stage3Residency::keep_after(size_t i) const {
  const int g = uses_[i];
  if (groups_[static_cast<size_t>(g)].numel < zero_.param_persistence_threshold) return true;
  // Reuse distance: elements of the distinct other groups used before g is used again.
  for (size_t k = i + 1; k < uses_.size(); ++k) {
    if (uses_[k] != g) continue;
    const std::set<int> between(uses_.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                uses_.begin() + static_cast<std::ptrdiff_t>(k));
    int64_t distance = 0;
    for (int b : between) distance += groups_[static_cast<size_t>(b)].numel;
    return distance < zero_.max_reuse_distance && live_ <= zero_.max_live_parameters;
  }
  return false;
}

void Stage3Residency::released(int g) {
  if (!resident(g)) return;
  landed(g);
  resident_[static_cast<size_t>(g)] = false;
  live_ -= groups_[static_cast<size_t>(g)].padded;
}

}  // namespace zt

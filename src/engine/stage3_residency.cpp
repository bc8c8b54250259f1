#include "engine/stage3_residency.h"

#include <algorithm>
#include <set>
#include <utility>

namespace zt {

Stage3Residency::Stage3Residency(std::vector<GroupPartition> groups, const ZeroConfig& zero)
    : groups_(std::move(groups)),
      zero_(zero),
      resident_(groups_.size(), false),
      in_flight_(groups_.size(), false) {}

std::vector<int> Stage3Residency::training_pass(int groups, bool tied_embeddings,
                                                int lowest_backward) {
  std::vector<int> uses;
  const int head = groups - 1;
  auto use = [&](int g) {
    uses.push_back(g);
    if (tied_embeddings && g == head) uses.push_back(0);
  };
  for (int g = 0; g < groups; ++g) use(g);
  for (int g = groups - 1; g >= lowest_backward; --g) use(g);
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

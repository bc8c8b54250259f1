#include "engine/param_gatherer.h"

#include <set>

#include "engine/zero_engine.h"
#include "util/error.h"

namespace zt {

ParamGatherer::ParamGatherer(Communicator& comm, MemoryTracker& memory, StepIntervals& intervals,
                             const std::vector<GroupPartition>& parts, DType dtype,
                             const ZeroConfig& zero, std::vector<const void*> shards,
                             HostDeviceCopier* host_shards)
    : comm_(comm),
      memory_(memory),
      intervals_(intervals),
      parts_(parts),
      dtype_(dtype),
      elem_size_(dtype_size(dtype)),
      zero_(zero),
      shards_(std::move(shards)),
      host_shards_(host_shards),
      gathered_(parts.size()),
      inflight_(parts.size(), false) {}

void ParamGatherer::begin_pass(std::vector<int> uses) {
  uses_ = std::move(uses);
}

void ParamGatherer::start_gather(int g) {
  const GroupPartition& p = parts_[static_cast<size_t>(g)];
  Gathered& G = gathered_[static_cast<size_t>(g)];
  G.buffer = TrackedBuffer<uint8_t>(memory_, MemCategory::kParams,
                                    static_cast<size_t>(p.padded) * elem_size_);
  const void* shard = shards_[static_cast<size_t>(g)];
  if (host_shards_) {
    const size_t bytes = static_cast<size_t>(p.shard) * elem_size_;
    G.staged_shard = TrackedBuffer<uint8_t>(memory_, MemCategory::kCommBuffers, bytes);
    host_shards_->host_to_device(G.staged_shard.data(), shard, bytes);
    host_shards_->synchronize();  // a GPU would record an event and make the gather wait on it
    shard = G.staged_shard.data();
  }
  G.handle = comm_.all_gather(dtype_, shard, G.buffer.data(), static_cast<size_t>(p.shard));
  live_elements_ += p.padded;
  inflight_[static_cast<size_t>(g)] = true;
  inflight_elements_ += p.padded;
}

void ParamGatherer::wait_gather(int g) {
  if (!inflight_[static_cast<size_t>(g)]) return;
  intervals_.time(StepIntervals::kCommWait, [&] {
    comm_.device_wait(gathered_[static_cast<size_t>(g)].handle);  // the forward comes after it
  });
  inflight_[static_cast<size_t>(g)] = false;
  inflight_elements_ -= parts_[static_cast<size_t>(g)].padded;
  gathered_[static_cast<size_t>(g)].staged_shard.reset();
}

void ParamGatherer::free_group(int g) {
  Gathered& G = gathered_[static_cast<size_t>(g)];
  if (G.empty()) return;
  wait_gather(g);
  live_elements_ -= parts_[static_cast<size_t>(g)].padded;
  G.buffer.reset();
}

void ParamGatherer::prefetch_from(size_t i) {
  if (!zero_.overlap_comm) return;
  for (size_t j = i + 1; j < uses_.size(); ++j) {
    const int g = uses_[j];
    if (is_live_or_inflight(g)) continue;
    const int64_t n = parts_[static_cast<size_t>(g)].padded;
    if (inflight_elements_ + n > zero_.prefetch_bucket_size) break;
    if (live_elements_ + n > zero_.max_live_parameters) break;
    start_gather(g);
  }
}

const void* ParamGatherer::acquire(size_t i) {
  const int g = uses_[i];
  if (!is_live_or_inflight(g)) start_gather(g);
  prefetch_from(i);
  wait_gather(g);
  return gathered_[static_cast<size_t>(g)].buffer.data();
}

void ParamGatherer::release_after(size_t i) {
  const int g = uses_[i];
  const GroupPartition& p = parts_[static_cast<size_t>(g)];
  if (p.numel < zero_.param_persistence_threshold) return;  // persistent for the step
  // Reuse distance: elements of the distinct other groups used before g is used again.
  for (size_t k = i + 1; k < uses_.size(); ++k) {
    if (uses_[k] != g) continue;
    std::set<int> between(uses_.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                          uses_.begin() + static_cast<std::ptrdiff_t>(k));
    int64_t distance = 0;
    for (int b : between) distance += parts_[static_cast<size_t>(b)].numel;
    if (distance < zero_.max_reuse_distance && live_elements_ <= zero_.max_live_parameters)
      return;  // keep: reused soon
    break;
  }
  free_group(g);
}

void ParamGatherer::release_all() {
  for (size_t g = 0; g < gathered_.size(); ++g) free_group(static_cast<int>(g));
}

}  // namespace zt

// Stage-3 parameter residency. Each group's working params exist as a 1/N shard; before a use
// the full group is all-gathered into a transient buffer, and after the use it is released
// unless (a) the group is persistent (numel < stage3_param_persistence_threshold: gathered once
// per step and kept), or (b) its next use in the static schedule comes within
// stage3_max_reuse_distance elements of other groups and the live budget allows it.
// With overlap, upcoming groups are prefetched while the current one computes, bounded by
// stage3_prefetch_bucket_size (elements in flight) and stage3_max_live_parameters.
// offload_param: the shards are host memory; each gather first stages the shard host→device
// (`host_shards` copier) into a device buffer that lives until the gather completes.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/phase_timeline.h"
#include "comm/communicator.h"
#include "engine/offload/host_device_copier.h"
#include "engine/zero_config.h"
#include "util/memory.h"

namespace zt {

struct GroupPartition;

class ParamGatherer {
 public:
  // Every wait for a gather is a kCommWait interval of `intervals`.
  ParamGatherer(Communicator& comm, MemoryTracker& memory, StepIntervals& intervals,
                const std::vector<GroupPartition>& parts, DType dtype, const ZeroConfig& zero,
                std::vector<const void*> shards, HostDeviceCopier* host_shards = nullptr);

  // Starts a pass over `uses` (group ids in execution order, e.g. one micro-batch's forward
  // and backward).
  void begin_pass(std::vector<int> uses);
  // The full (padded) working params of uses[i]; gathers or waits as needed, then prefetches.
  const void* acquire(size_t i);
  // Called after uses[i] has been computed: keeps or frees the group.
  void release_after(size_t i);
  // Frees every gathered group (after the optimizer has changed the shards).
  void release_all();
  int64_t live_elements() const { return live_elements_; }

 private:
  bool is_live_or_inflight(int g) const { return !gathered_[static_cast<size_t>(g)].empty(); }
  void start_gather(int g);
  void wait_gather(int g);
  void free_group(int g);
  void prefetch_from(size_t i);

  Communicator& comm_;
  MemoryTracker& memory_;
  StepIntervals& intervals_;
  const std::vector<GroupPartition>& parts_;
  DType dtype_;
  size_t elem_size_;
  ZeroConfig zero_;
  std::vector<const void*> shards_;
  HostDeviceCopier* host_shards_;
  struct Gathered {
    TrackedBuffer<uint8_t> buffer;
    TrackedBuffer<uint8_t> staged_shard;  // offload_param: the shard on the device
    CommHandle handle;
    bool empty() const { return buffer.size() == 0; }
  };
  std::vector<Gathered> gathered_;
  std::vector<int> uses_;
  int64_t live_elements_ = 0;
  int64_t inflight_elements_ = 0;
  std::vector<bool> inflight_;
};

}  // namespace zt

// Stage-3 parameter gathering. Each group's working params exist as a 1/N shard; before a use
// the full group is all-gathered into a transient buffer and released after, by the residency
// policy of engine/stage3_residency.h (persistence, reuse distance, prefetch bounds), which this
// class executes with real collectives.
// offload_param: the shards are host memory; each gather first stages the shard host→device
// (`host_shards` copier) into a device buffer that lives until the gather completes.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/phase_timeline.h"
#include "comm/communicator.h"
#include "engine/engine_types.h"
#include "engine/offload/host_device_copier.h"
#include "engine/stage3_residency.h"
#include "engine/zero_config.h"
#include "util/memory.h"

namespace zt {

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

 private:
  void start_gather(int g);
  void wait_gather(int g);
  void free_group(int g);

  Communicator& comm_;
  MemoryTracker& memory_;
  StepIntervals& intervals_;
  const std::vector<GroupPartition>& parts_;
  DType dtype_;
  size_t elem_size_;
  Stage3Residency residency_;
  std::vector<const void*> shards_;
  HostDeviceCopier* host_shards_;
  struct Gathered {
    TrackedBuffer<uint8_t> buffer;
    TrackedBuffer<uint8_t> staged_shard;  // offload_param: the shard on the device
    CommHandle handle;
    bool empty() const { return buffer.size() == 0; }
  };
  std::vector<Gathered> gathered_;
};

}  // namespace zt

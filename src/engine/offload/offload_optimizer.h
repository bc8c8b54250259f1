// ZeRO-Offload optimizer step (engine/offload/offload_config.h): the rank's optimizer state lives
// in an OptimizerStateStore (host memory or NVMe), the reduced fp32 gradient shard of each group is
// copied device→host as soon as its reduction lands (gradient_ready, called from the reducer's
// completion during backward), and step() runs the CPU AdamW kernel (backend/cpu/cpu_adam.h) tile
// by tile, copying each tile's updated working values (bf16 or fp32) host→device (or, with the
// working params themselves offloaded, writing them in host memory).
// The kernel is the one the CPU backend's adamw uses, segments split only where the weight-decay
// setting changes (as the engine's own step does), so results are bitwise those of the
// non-offloaded engine.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "engine/decay_segments.h"
#include "engine/offload/host_device_copier.h"
#include "engine/offload/offload_config.h"
#include "engine/offload/optimizer_state_store.h"
#include "engine/zero_config.h"
#include "util/memory.h"

namespace zt {

struct OffloadTraffic {
  uint64_t device_to_host = 0, host_to_device = 0, nvme_read = 0, nvme_written = 0,
           nvme_resident = 0;
};

class OffloadOptimizer {
 public:
  // own_sizes[g]: elements of group g's own range; segments[g]: its decay segments in own-range
  // coordinates. Host pool: fp32 gradient shards, two tiles of working-dtype staging, and the
  // store (master/m/v, or NVMe swap buffers). host_comm: the host-buffer communicator (NVMe
  // setup checks).
  OffloadOptimizer(const OffloadConfig& config, std::vector<int64_t> own_sizes,
                   std::vector<std::vector<DecaySegment>> segments, Precision precision,
                   MemoryTracker& memory, Communicator& host_comm, HostDeviceCopier& copier);

  // Waits for a delayed update still running (an error can end a step before it is published):
  // the host thread reads buffers the members below own.
  ~OffloadOptimizer() {
    if (running_.valid()) running_.wait();
  }
  OffloadOptimizer(const OffloadOptimizer&) = delete;
  OffloadOptimizer& operator=(const OffloadOptimizer&) = delete;

  void initialize(int g, const float* master) { store_->initialize(g, master); }
  // Group g's reduced gradient shard (own_sizes[g] fp32 on the device) is final.
  void gradient_ready(int g, const float* device_grads);
  // AdamW (h.weight_decay is replaced per segment by weight_decay or 0) over every tile; tile
  // [b, b+n) of group g lands at work_out(g) + b elements of the working dtype: device memory,
  // or host memory when the config offloads params.
  void step(AdamWHyper h, float weight_decay, const std::function<void*(int g)>& work_out);
  // Delayed parameter update (OffloadConfig::delay): the AdamW of the gradient shards landed so
  // far starts on a host thread and returns at once; the next step's shards land in a second
  // set of host buffers meanwhile. The masters it updates are published by publish().
  void start_update(AdamWHyper h, float weight_decay);
  // Waits for the update started last, rethrowing its error; false when none was running.
  bool finish_update();
  bool update_running() const { return running_.valid(); }
  // Every trained tile's masters as working values at work_out(g) (as step() writes them).
  void publish(const std::function<void*(int g)>& work_out);
  OptimizerStateStore& store() { return *store_; }
  OffloadTraffic traffic() const;
  // The last step()'s CPU AdamW: elements updated and seconds in its kernel (the copies, the
  // rounding of frozen tiles and NVMe swaps excluded).
  struct AdamTiming {
    int64_t params = 0;
    double seconds = 0;
  };
  AdamTiming last_adam() const { return last_adam_; }

 private:
  std::vector<int64_t> own_sizes_;
  std::vector<std::vector<DecaySegment>> segments_;
  Precision precision_;
  bool params_on_host_;
  HostDeviceCopier& copier_;
  std::unique_ptr<OptimizerStateStore> store_;
  // Tiles of AdamW over the shards in `grads`; with work_out, each tile's working values go
  // there, else only the masters change.
  void update_tiles(AdamWHyper h, float weight_decay,
                    const std::vector<TrackedBuffer<float>>& grads,
                    const std::function<void*(int g)>* work_out);
  // Copies staging tile `slot` (`bytes` of working values) to `out`, on the device or the host.
  void send_tile(size_t slot, void* out, size_t bytes);
  std::vector<TrackedBuffer<float>> host_grads_;
  std::vector<TrackedBuffer<float>> pending_grads_;  // delay: the shards the running update reads
  std::future<void> running_;                        // delay: the update on its host thread
  // Two tiles of working values: the host→device copy of one overlaps the update of the next.
  std::array<TrackedBuffer<uint8_t>, 2> staging_;
  std::array<uint64_t, 2> staging_copied_{};  // copier marks after each staging tile's copy
  AdamTiming last_adam_;
};

}  // namespace zt

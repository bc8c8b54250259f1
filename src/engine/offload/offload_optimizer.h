// ZeRO-Offload optimizer step (engine/offload/offload_config.h): the rank's optimizer state lives
// in an OptimizerStateStore (host memory or NVMe), the reduced gradient shard of each group is
// copied device→host as soon as its reduction lands (gradient_ready, called from the reducer's
// completion during backward; in fp32, or rounded to bf16 on the device first with
// bf16_gradient_copies), and step() runs the CPU AdamW kernel (backend/cpu/cpu_adam.h) tile
// by tile, copying each tile's updated working values (bf16 or fp32) host→device (or, with the
// working params themselves offloaded, writing them in host memory).
// The kernel is the one the CPU backend's adamw uses, segments split only where the weight-decay
// setting changes (as the engine's own step does), so results are bitwise those of the
// non-offloaded engine (with fp32 gradient copies; with bf16 ones, those of AdamW on the gradients
// rounded to bf16).
//
// Exact overlap (OffloadConfig::overlap): begin_overlap() before the backward gives the step's
// hyperparameters as they are when the step is neither clipped nor skipped; from then on each
// group whose gradient shard has reached the host is updated by the host worker (master, m and v
// kept first; the updated working values written beside them in the same pass), while the device
// computes the rest of the backward. After the global norm, commit_overlap() keeps the updates
// when the step's hyperparameters turn out to be the speculated ones and sends each group's
// working values to the device as soon as the worker is done with it, while the worker updates
// the next; otherwise roll_back_overlap() puts the kept state back, and step() (clip) or nothing
// (skip) follows. Bitwise the step without overlap.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "engine/decay_segments.h"
#include "engine/memory_plan.h"
#include "engine/offload/host_device_copier.h"
#include "engine/offload/host_worker.h"
#include "engine/offload/offload_config.h"
#include "engine/offload/optimizer_state_store.h"
#include "engine/zero_config.h"
#include "util/memory.h"

namespace zt {

struct OffloadTraffic {
  uint64_t device_to_host = 0, host_to_device = 0, nvme_read = 0, nvme_written = 0,
           nvme_resident = 0;
};

// The store's tile: sub_group_size elements, at most the largest own range.
int64_t offload_tile(const OffloadConfig& config, const std::vector<int64_t>& own_sizes);

class OffloadOptimizer {
 public:
  // own_sizes[g]: elements of group g's own range; segments[g]: its decay segments in own-range
  // coordinates. Host pool: gradient shards (fp32 or bf16), two tiles of working-dtype staging,
  // and the store (master/m/v, or NVMe swap buffers); with bf16 gradient copies, two device
  // staging buffers that `device` rounds the shards into. host_comm: the host-buffer communicator
  // (NVMe setup checks).
  OffloadOptimizer(const OffloadConfig& config, std::vector<int64_t> own_sizes,
                   std::vector<std::vector<DecaySegment>> segments, Precision precision,
                   MemoryTracker& memory, Communicator& host_comm, HostDeviceCopier& copier,
                   Backend& device);

  // The host-pool (and nvme-pool) buffers of those settings: the gradient shards (and a delayed
  // update's second set; bf16 copies: the two device staging buffers), the kept state of the exact
  // overlap, the two staging tiles, and the store (master/m/v, or the swap buffers and file). What
  // the constructor and its store allocate.
  static MemoryPlan plan(const OffloadConfig& config, const std::vector<int64_t>& own_sizes,
                         Precision precision);

  // The worker ends (after its queued tasks) before the buffers its tasks read go: it is the
  // last member.
  ~OffloadOptimizer() = default;
  OffloadOptimizer(const OffloadOptimizer&) = delete;
  OffloadOptimizer& operator=(const OffloadOptimizer&) = delete;

  void initialize(int g, const float* master) { store_->initialize(g, master); }
  // Group g's reduced gradient shard (own_sizes[g] fp32 on the device) is final: its copy to the
  // host is issued (bf16 copies: rounded into the next device staging buffer first, the device
  // waiting for that buffer's previous copy; the host does not). With an overlap begun, the groups
  // whose copies have landed go to the host worker.
  void gradient_ready(int g, const float* device_grads);
  // Exact overlap (see the top of this file; needs OffloadConfig::keeps_speculated_state): the
  // step's hyperparameters if it is neither clipped nor skipped. An overlap still open is rolled
  // back first.
  void begin_overlap(AdamWHyper h, float weight_decay);
  bool overlap_open() const { return speculation_.open; }
  // Hands the groups whose copies have landed since the last gradient_ready to the worker (the
  // optimizer step calls it before the norm).
  void poll_overlap();
  // With the step's real hyperparameters: when they are the speculated ones, sends each
  // speculated group's working values as its update finishes, updates the groups not speculated
  // on (as step() would), and returns true once every value is at work_out; otherwise rolls back
  // and returns false (the caller runs step()).
  bool commit_overlap(AdamWHyper h, float weight_decay,
                      const std::function<void*(int g)>& work_out);
  // Waits for the worker and puts back the state of every group it updated; nothing when no
  // overlap is open. The gradient copies still in flight land unused (step() waits for them).
  void roll_back_overlap();
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
  bool update_running() const { return delayed_running_; }
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
  // The CPU AdamW's rate on the host thread that runs the step's (its CPUs, its OpenMP team):
  // elements per second, the best of two timed passes over `elements` fresh elements (after one
  // that touches their pages), writing the working values as step()'s kernel calls do. Start-up
  // only: it waits for the thread; its buffers (about 18 bytes per element) are not tracked.
  double measure_adam_rate(int64_t elements);
  // The elements of the last committed overlap handed to the host thread before the gradient
  // norm (as their copies landed during the backward, or at the step's start).
  int64_t speculated_params() const { return speculated_params_; }

 private:
  // fn over group g's tiles in the host store (the tiles step() visits), in order.
  void for_each_resident_tile(int g, const std::function<void(const StateTile&)>& fn);
  // `grads`: a gradient shard on the host, in the copy dtype (fp32 or bf16), from its first
  // element. Group g's tiles: AdamW over grads, the timing added to `timing`; with `values`, the
  // group's updated working values (own range) are written there too.
  void update_group(int g, const AdamWHyper& h, float weight_decay, const uint8_t* grads,
                    AdamTiming& timing, uint8_t* values = nullptr);
  // Tile t: AdamW over grads; `values` (may be null): the tile's working values afterwards, its
  // frozen parts included.
  void update_tile(const StateTile& t, const AdamWHyper& h, float weight_decay,
                   const uint8_t* grads, uint8_t* values, AdamTiming& timing);
  // update_tile into the next staging tile, which then goes to work_out(t.group) at the tile.
  void update_and_send_tile(const StateTile& t, const AdamWHyper& h, float weight_decay,
                            const uint8_t* grads, const std::function<void*(int g)>& work_out,
                            size_t& tile_index, AdamTiming& timing);
  // The staging tile for the tile_index-th tile of a pass (incremented), once its last copy is
  // done.
  size_t next_staging_slot(size_t& tile_index);
  // count masters as working values (rounded to bf16/fp16, or copied) at out.
  void write_working_values(const float* master, int64_t count, uint8_t* out);
  // AdamW over the trained part of tile t: the segments of its group inside it, with
  // weight_decay where they decay. out_bf16/out_f32 (may be null) receive the updated masters at
  // the tile's offsets, as cpu::adam_update writes them.
  void adam_tile(const StateTile& t, AdamWHyper h, float weight_decay, const uint8_t* grads,
                 bf16_t* out_bf16, float* out_f32, uint16_t* out_fp16, AdamTiming& timing);
  // Hands the groups whose gradient copies have landed to the worker, in landing order; `wait`:
  // waits for every copy first.
  void hand_over_landed(bool wait);
  void speculate_group(int g);  // on the worker: keep group g's state, then update it
  // keep: group g's master, m and v into its kept state; else back from it.
  void copy_kept_state(int g, bool keep);
  std::vector<int64_t> own_sizes_;
  std::vector<std::vector<DecaySegment>> segments_;
  Precision precision_;
  Backend& device_;          // rounds the gradient shards for bf16 copies
  bool bf16_grads_ = false;  // OffloadConfig::bf16_gradient_copies
  // bf16 copies: the device buffers the shards are rounded into, taken in turn; the device
  // rewrites each once the copy that read it (its mark) is done.
  std::array<TrackedBuffer<bf16_t>, 2> grad_copy_staging_;
  std::array<uint64_t, 2> grad_copy_done_{};
  uint64_t grad_copies_issued_ = 0;
  bool params_on_host_;
  HostDeviceCopier& copier_;
  std::unique_ptr<OptimizerStateStore> store_;
  // Tiles of AdamW over the shards in `grads`; with work_out, each tile's working values go
  // there, else only the masters change.
  void update_tiles(AdamWHyper h, float weight_decay,
                    const std::vector<TrackedBuffer<uint8_t>>& grads,
                    const std::function<void*(int g)>* work_out);
  // Copies `bytes` of working values to `out`, on the device or the host.
  void send(void* out, const void* values, size_t bytes);
  // send() of staging tile `slot`, its copy marked.
  void send_tile(size_t slot, void* out, size_t bytes);
  std::vector<TrackedBuffer<uint8_t>> host_grads_;     // the copy dtype's bytes
  std::vector<TrackedBuffer<uint8_t>> pending_grads_;  // delay: the shards the running update reads
  bool delayed_running_ = false;                       // delay: an update submitted to the worker
  int64_t tile_ = 1;                                   // the store's tile (sub_group_size)
  // Exact overlap: the open speculation, and each group's master, m and v before it (3 × own).
  struct Speculation {
    bool open = false;
    AdamWHyper h;
    float weight_decay = 0;
    std::deque<std::pair<int, uint64_t>> landing;  // groups whose gradient copies are in flight
    std::vector<std::pair<int, uint64_t>> handed;  // groups handed to the worker, their tickets
    std::vector<char> kept;                        // the groups the worker kept (and updated)
    AdamTiming timing;                             // the worker's kernel time
    int64_t handed_params = 0;           // elements handed to the worker during the backward
    std::atomic<bool> cancelled{false};  // a roll-back: the worker skips the groups queued
  } speculation_;
  std::vector<TrackedBuffer<float>> kept_state_;  // empty for the groups not speculated on
  // The speculated update's working values of each group with kept state (own range): they go to
  // the device as soon as the group's update is done and the norm says keep.
  std::vector<TrackedBuffer<uint8_t>> speculated_values_;
  bool overlap_configured_ = false;
  int64_t speculated_params_ = 0;
  // Two tiles of working values: the host→device copy of one overlaps the update of the next.
  std::array<TrackedBuffer<uint8_t>, 2> staging_;
  std::array<uint64_t, 2> staging_copied_{};  // copier marks after each staging tile's copy
  AdamTiming last_adam_;
  HostWorker worker_;  // last: joined before the buffers its tasks use are freed
};

}  // namespace zt

// Gradient reduction for the ZeRO stages, bucketed and asynchronous:
//   all-reduce (stage 0): the group's full fp32 gradient, in place, in reduce_bucket_size chunks;
//   reduce-scatter (stages 1-3): rank r receives the sum of shard r. A bucket covers at most
//   reduce_bucket_size elements of the group (per-rank chunks of the shard range, packed when the
//   bucket is smaller than the group).
// Results land when the slot is drained: stage 1 writes the reduced shard into the full
// accumulator at the rank's offset, stages 2/3 add it into the fp32 shard accumulator after a
// step's first micro-batch, whose shard the collective stores into that accumulator itself. Nothing
// here is zeroed: the backward writes a bucket whole. Every buffer is device memory: packing and
// landing go through the backend.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "backend/phase_timeline.h"
#include "comm/communicator.h"
#include "engine/memory_plan.h"
#include "util/memory.h"

namespace zt {

class GradReducer {
 public:
  enum class Mode { kAllReduce, kReduceScatterStore, kReduceScatterAccumulate };

  // max_padded_group: largest padded group. Buckets (model-written gradients) are allocated
  // only when `own_buckets` (stages 2/3); receive/pack buffers only for reduce-scatter modes.
  // Every wait for a reduction is a kCommWait interval of `intervals`.
  // `order`: how the reduce-scatters associate their sums over the ranks (SumOrder::kRankTree
  // for world-invariant training).
  GradReducer(Backend& backend, Communicator& comm, MemoryTracker& memory, StepIntervals& intervals,
              int64_t max_padded_group, int64_t bucket_elements, int num_slots, bool own_buckets,
              bool reduce_scatter, SumOrder order = SumOrder::kLibrary);
  // The buffers of those settings over `world` ranks (kReduceBucket, kReducePacked,
  // kReduceReceive and, in rank-tree order from 4 ranks on, kReduceTreeScratch of each slot):
  // what the constructor allocates.
  static MemoryPlan plan(int64_t max_padded_group, int64_t bucket_elements, int world,
                         int num_slots, bool own_buckets, bool reduce_scatter,
                         SumOrder order = SumOrder::kLibrary);

  // A full-group fp32 buffer (padded size) the model may write a group's gradients into; the
  // slot is free (its previous reduction drained). Not zeroed: it holds what an earlier group
  // left, and the backward overwrites it whole (GradWrite::kAssign).
  float* acquire_bucket(int64_t padded);
  // Starts reducing `padded` elements at `grads` (the acquired bucket, or a caller-owned
  // accumulator in all-reduce/store modes); `dest` receives the shard (null for all-reduce).
  // A store whose dest lies outside grads is reduced straight into dest, which the collective
  // may write at any time until the slot is drained: like grads, dest is the collective's until
  // then. `on_landed`, if set, runs once the result has landed in `dest` (offload: copy it to
  // host).
  void start(Mode mode, float* grads, int64_t padded, float* dest,
             std::function<void()> on_landed = {});
  // Waits for every outstanding reduction and lands the results.
  void drain_all();
  // Polls outstanding handles so the library makes progress during compute.
  void poll();

 private:
  struct Slot {
    TrackedBuffer<float> bucket;        // full padded group, written by the model
    TrackedBuffer<float> packed;        // chunk-major packed copy when buckets split the group
    TrackedBuffer<float> recv;          // this rank's reduced shard
    TrackedBuffer<float> tree_scratch;  // rank-tree partial sums, (N − 2)·shard (lent to comm_)
    std::vector<CommHandle> handles;
    Mode mode = Mode::kAllReduce;
    float* dest = nullptr;
    std::function<void()> on_landed;
    int64_t shard = 0;
    bool busy = false;
    bool lands_in_dest = false;  // a store reduced straight into dest (start)
  };
  void drain(Slot& s);

  Backend& be_;
  Communicator& comm_;
  StepIntervals& intervals_;
  int world_;
  int64_t bucket_elements_;
  SumOrder order_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
  Slot* current_ = nullptr;
};

}  // namespace zt

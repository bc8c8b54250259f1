#include "engine/grad_reducer.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "util/error.h"

namespace zt {

GradReducer::GradReducer(Backend& backend, Communicator& comm, MemoryTracker& memory,
                         StepIntervals& intervals, int64_t max_padded_group,
                         int64_t bucket_elements, int num_slots, bool own_buckets,
                         bool reduce_scatter, SumOrder order)
    : be_(backend),
      comm_(comm),
      intervals_(intervals),
      world_(comm.world_size()),
      bucket_elements_(bucket_elements),
      order_(order) {
  slots_.resize(static_cast<size_t>(num_slots));
  const MemoryPlan planned = plan(max_padded_group, bucket_elements, world_, num_slots, own_buckets,
                                  reduce_scatter, order);
  for (int k = 0; k < num_slots; ++k) {
    Slot& s = slots_[static_cast<size_t>(k)];
    s.bucket = allocate_planned<float>(memory, planned, BufferRole::kReduceBucket, k);
    s.packed = allocate_planned<float>(memory, planned, BufferRole::kReducePacked, k);
    s.recv = allocate_planned<float>(memory, planned, BufferRole::kReduceReceive, k);
    s.tree_scratch = allocate_planned<float>(memory, planned, BufferRole::kReduceTreeScratch, k);
  }
}

MemoryPlan GradReducer::plan(int64_t max_padded_group, int64_t bucket_elements, int world,
                             int num_slots, bool own_buckets, bool reduce_scatter, SumOrder order) {
  const int64_t max_shard = max_padded_group / world;
  const bool needs_packing = reduce_scatter && bucket_elements / world < max_shard;
  MemoryPlan p;
  for (int k = 0; k < num_slots; ++k) {
    if (own_buckets)
      p.add(BufferRole::kReduceBucket, k, MemCategory::kCommBuffers, max_padded_group * 4);
    if (needs_packing)
      p.add(BufferRole::kReducePacked, k, MemCategory::kCommBuffers, max_padded_group * 4);
    if (reduce_scatter)
      p.add(BufferRole::kReduceReceive, k, MemCategory::kCommBuffers, max_shard * 4);
    // The rank tree's partial sums of every call of a slot (its chunks are in flight at once).
    const auto tree_scratch =
        static_cast<int64_t>(rank_tree_scratch_elements(world, static_cast<size_t>(max_shard)));
    if (reduce_scatter && order == SumOrder::kRankTree && tree_scratch > 0)
      p.add(BufferRole::kReduceTreeScratch, k, MemCategory::kCommBuffers, tree_scratch * 4);
  }
  return p;
}

float* GradReducer::acquire_bucket(int64_t padded) {
  Slot& s = slots_[next_slot_];
  if (s.busy) drain(s);
  ZT_CHECK(static_cast<size_t>(padded) <= s.bucket.size(), "gradient bucket too small");
  current_ = &s;
  return s.bucket.data();
}

void GradReducer::start(Mode mode, float* grads, int64_t padded, float* dest,
                        std::function<void()> on_landed) {
  Slot& s = current_ ? *current_ : slots_[next_slot_];
  if (s.busy) drain(s);
  current_ = nullptr;
  next_slot_ = (next_slot_ + 1) % slots_.size();
  s.mode = mode;
  s.dest = dest;
  s.on_landed = std::move(on_landed);
  s.busy = true;
  s.shard = padded / world_;
  ZT_CHECK(mode == Mode::kAllReduce || dest != nullptr,
           "GradReducer: a reduce-scatter needs the shard's destination");
  // A store lands in dest itself when dest is not inside the reduced buffer (stages 2/3 and the
  // tree's leaves; stage 1's own range is): no copy out of recv.
  const auto address = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
  s.lands_in_dest =
      mode == Mode::kReduceScatterStore &&
      (address(dest + s.shard) <= address(grads) || address(grads + padded) <= address(dest));
  ZT_CHECK(
      mode == Mode::kAllReduce || s.lands_in_dest || static_cast<size_t>(s.shard) <= s.recv.size(),
      "GradReducer: a shard of " + std::to_string(s.shard) +
          " elements is past its slot's receive buffer");
  float* const landing = s.lands_in_dest ? dest : s.recv.data();
  if (mode == Mode::kAllReduce) {
    // In place, in chunks of the bucket size.
    for (int64_t off = 0; off < padded; off += bucket_elements_) {
      const int64_t n = std::min(bucket_elements_, padded - off);
      s.handles.push_back(comm_.all_reduce_sum(grads + off, static_cast<size_t>(n)));
    }
    return;
  }
  // Reduce-scatter: chunks of at most bucket/N elements of every rank's shard.
  const int64_t per_rank = std::max<int64_t>(1, bucket_elements_ / world_);
  // Chunk c0's rank-tree partial sums: its own (N − 2)·len elements of the slot's scratch.
  ZT_CHECK(
      s.tree_scratch.size() == 0 ||
          rank_tree_scratch_elements(world_, static_cast<size_t>(s.shard)) <= s.tree_scratch.size(),
      "GradReducer: a shard of " + std::to_string(s.shard) +
          " elements is past the rank-tree scratch its slot was planned with");
  auto scratch_at = [&](int64_t c0) -> float* {
    if (s.tree_scratch.size() == 0) return nullptr;
    return s.tree_scratch.data() + rank_tree_scratch_elements(world_, static_cast<size_t>(c0));
  };
  if (per_rank >= s.shard) {
    s.handles.push_back(comm_.reduce_scatter_sum(grads, landing, static_cast<size_t>(s.shard),
                                                 order_, scratch_at(0)));
    return;
  }
  float* packed = s.packed.data();
  DeviceMemory& device = be_.device_memory();
  for (int64_t c0 = 0; c0 < s.shard; c0 += per_rank) {
    const int64_t len = std::min(per_rank, s.shard - c0);
    float* chunk = packed + c0 * world_;
    for (int r = 0; r < world_; ++r)
      device.copy(chunk + r * len, grads + r * s.shard + c0,
                  static_cast<size_t>(len) * sizeof(float));
    s.handles.push_back(comm_.reduce_scatter_sum(chunk, landing + c0, static_cast<size_t>(len),
                                                 order_, scratch_at(c0)));
  }
}

void GradReducer::drain(Slot& s) {
  if (!s.busy) return;
  intervals_.time(StepIntervals::kCommWait, [&] {
    for (CommHandle& h : s.handles) comm_.device_wait(h);  // landing and reuse come after it
  });
  s.handles.clear();
  if (s.mode == Mode::kReduceScatterStore && !s.lands_in_dest) {
    be_.device_memory().copy(s.dest, s.recv.data(), static_cast<size_t>(s.shard) * sizeof(float));
  } else if (s.mode == Mode::kReduceScatterAccumulate) {
    be_.add_inplace(s.dest, s.recv.data(), s.shard);  // dest += recv, elementwise
  }
  s.busy = false;
  if (s.on_landed) std::exchange(s.on_landed, {})();
}

void GradReducer::drain_all() {
  // Drain in issue order so accumulation order is fixed.
  for (size_t k = 0; k < slots_.size(); ++k) drain(slots_[(next_slot_ + k) % slots_.size()]);
}

void GradReducer::poll() {
  for (Slot& s : slots_)
    for (CommHandle& h : s.handles) h.test();
}

}  // namespace zt

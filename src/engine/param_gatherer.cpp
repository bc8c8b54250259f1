#include "engine/param_gatherer.h"

#include "engine/engine_types.h"
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
      residency_(parts, zero),
      shards_(std::move(shards)),
      host_shards_(host_shards),
      gathered_(parts.size()) {}

void ParamGatherer::begin_pass(std::vector<int> uses) {
  residency_.begin_pass(std::move(uses));
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
}

void ParamGatherer::wait_gather(int g) {
  if (!residency_.in_flight(g)) return;
  intervals_.time(StepIntervals::kCommWait, [&] {
    comm_.device_wait(gathered_[static_cast<size_t>(g)].handle);  // the forward comes after it
  });
  residency_.landed(g);
  gathered_[static_cast<size_t>(g)].staged_shard.reset();
}

void ParamGatherer::free_group(int g) {
  if (!residency_.resident(g)) return;
  wait_gather(g);
  residency_.released(g);
  gathered_[static_cast<size_t>(g)].buffer.reset();
}

const void* ParamGatherer::acquire(size_t i) {
  for (int g : residency_.gathers_for(i)) start_gather(g);
  const int g = residency_.uses()[i];
  wait_gather(g);
  return gathered_[static_cast<size_t>(g)].buffer.data();
}

void ParamGatherer::release_after(size_t i) {
  if (!residency_.keep_after(i)) free_group(residency_.uses()[i]);
}

void ParamGatherer::release_all() {
  for (size_t g = 0; g < gathered_.size(); ++g) free_group(static_cast<int>(g));
}

}  // namespace zt

#include "engine/offload/offload_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cpu/cpu_adam.h"
#include "engine/offload/nvme_swapper.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/tensor_view.h"

namespace zt {

OffloadOptimizer::OffloadOptimizer(const OffloadConfig& config, std::vector<int64_t> own_sizes,
                                   std::vector<std::vector<DecaySegment>> segments,
                                   Precision precision, MemoryTracker& memory,
                                   Communicator& host_comm, HostDeviceCopier& copier)
    : own_sizes_(std::move(own_sizes)),
      segments_(std::move(segments)),
      precision_(precision),
      params_on_host_(config.param_offloaded()),
      copier_(copier) {
  int64_t max_own = 1;
  for (int64_t n : own_sizes_) {
    host_grads_.emplace_back(memory, MemCategory::kHostOffload, static_cast<size_t>(n));
    if (config.delay > 0)
      pending_grads_.emplace_back(memory, MemCategory::kHostOffload, static_cast<size_t>(n));
    max_own = std::max(max_own, n);
  }
  const int64_t tile = std::min(config.sub_group_size, max_own);
  const size_t elem = dtype_size(working_dtype(precision_));
  for (TrackedBuffer<uint8_t>& s : staging_)
    s = TrackedBuffer<uint8_t>(memory, MemCategory::kHostOffload, static_cast<size_t>(tile) * elem);
  if (config.optimizer == OffloadDevice::kNvme)
    store_ = make_nvme_state_store(own_sizes_, tile, static_cast<int>(config.buffer_count),
                                   config.nvme_path, host_comm, memory);
  else
    store_ = make_host_state_store(own_sizes_, tile, memory);
}

namespace {

// Whether the segments (sorted, disjoint) cover [begin, begin + count) entirely.
bool covers(const std::vector<DecaySegment>& segments, int64_t begin, int64_t count) {
  int64_t covered = 0;
  for (const DecaySegment& s : segments)
    covered += std::max<int64_t>(0, std::min(s.end, begin + count) - std::max(s.begin, begin));
  return covered == count;
}

}  // namespace

void OffloadOptimizer::gradient_ready(int g, const float* device_grads) {
  const size_t i = static_cast<size_t>(g);
  copier_.device_to_host(host_grads_[i].data(), device_grads, host_grads_[i].bytes());
}

void OffloadOptimizer::step(AdamWHyper h, float weight_decay,
                            const std::function<void*(int g)>& work_out) {
  copier_.synchronize();  // every gradient shard is on the host
  update_tiles(h, weight_decay, host_grads_, &work_out);
  copier_.synchronize();  // every updated tile is on the device before the params are used
}

void OffloadOptimizer::start_update(AdamWHyper h, float weight_decay) {
  ZT_CHECK(!pending_grads_.empty() && !running_.valid(),
           "OffloadOptimizer::start_update: no delay configured, or an update still running");
  copier_.synchronize();  // every gradient shard is on the host
  std::swap(host_grads_, pending_grads_);
  running_ = std::async(std::launch::async, [this, h, weight_decay] {
    update_tiles(h, weight_decay, pending_grads_, nullptr);
  });
}

bool OffloadOptimizer::finish_update() {
  if (!running_.valid()) return false;
  running_.get();
  return true;
}

void OffloadOptimizer::send_tile(size_t slot, void* out, size_t bytes) {
  if (params_on_host_) {
    std::memcpy(out, staging_[slot].data(), bytes);
  } else {
    copier_.host_to_device(out, staging_[slot].data(), bytes);
    staging_copied_[slot] = copier_.mark();
  }
}

void OffloadOptimizer::publish(const std::function<void*(int g)>& work_out) {
  const DType work = working_dtype(precision_);
  const size_t elem = dtype_size(work);
  size_t tile_index = 0;
  store_->update_tiles([&](const StateTile& t) {
    if (segments_[static_cast<size_t>(t.group)].empty()) return;  // a frozen group: unchanged
    const size_t slot = tile_index++ % staging_.size();
    if (tile_index > staging_.size()) copier_.synchronize_until(staging_copied_[slot]);
    if (work == DType::kFloat32)
      std::memcpy(staging_[slot].data(), t.master, static_cast<size_t>(t.count) * sizeof(float));
    else
      round_16bit(work, t.master, reinterpret_cast<uint16_t*>(staging_[slot].data()),
                  static_cast<size_t>(t.count));
    send_tile(slot, static_cast<uint8_t*>(work_out(t.group)) + static_cast<size_t>(t.begin) * elem,
              static_cast<size_t>(t.count) * elem);
  });
  copier_.synchronize();
}

void OffloadOptimizer::update_tiles(AdamWHyper h, float weight_decay,
                                    const std::vector<TrackedBuffer<float>>& grads_of,
                                    const std::function<void*(int g)>* work_out) {
  const cpu::AdamSimd path = cpu::best_adam_simd();
  const DType work = working_dtype(precision_);
  const bool bf16 = work == DType::kBf16, fp16 = work == DType::kFloat16;
  const size_t elem = dtype_size(work);
  size_t tile_index = 0;
  last_adam_ = {};
  store_->update_tiles([&](const StateTile& t) {
    const size_t slot = tile_index++ % staging_.size();
    uint8_t* staging = staging_[slot].data();
    // The copy that last read this staging tile (two tiles ago) must be done before the rewrite;
    // the previous tile's copy keeps running under this tile's update.
    if (work_out && tile_index > staging_.size()) copier_.synchronize_until(staging_copied_[slot]);
    const float* grads = grads_of[static_cast<size_t>(t.group)].data();
    const std::vector<DecaySegment>& segments = segments_[static_cast<size_t>(t.group)];
    // Frozen tensors have no segment (decay_segments.h): the tile goes out whole, so their part
    // of it is their master as working params, which is what the device holds already.
    if (work_out && !covers(segments, t.begin, t.count)) {
      if (bf16 || fp16)
        round_16bit(work, t.master, reinterpret_cast<uint16_t*>(staging),
                    static_cast<size_t>(t.count));
      else
        std::memcpy(staging, t.master, static_cast<size_t>(t.count) * sizeof(float));
    }
    for (const DecaySegment& s : segments) {
      const int64_t lo = std::max(s.begin, t.begin), hi = std::min(s.end, t.begin + t.count);
      if (lo >= hi) continue;
      const int64_t at = lo - t.begin;
      h.weight_decay = s.decay ? weight_decay : 0.0f;
      const auto start = std::chrono::steady_clock::now();
      // Without work_out (a delayed update) only the masters and moments change.
      cpu::adam_update(
          path, t.master + at, t.m + at, t.v + at, grads + lo,
          work_out && bf16 ? reinterpret_cast<bf16_t*>(staging) + at : nullptr,
          work_out && !bf16 && !fp16 ? reinterpret_cast<float*>(staging) + at : nullptr, hi - lo,
          h);
      last_adam_.seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      last_adam_.params += hi - lo;
      // fp16: the updated masters, rounded (the Adam kernels write bf16 or fp32 only).
      if (work_out && fp16)
        floats_to_fp16(t.master + at, reinterpret_cast<uint16_t*>(staging) + at,
                       static_cast<size_t>(hi - lo));
    }
    if (work_out)
      send_tile(slot,
                static_cast<uint8_t*>((*work_out)(t.group)) + static_cast<size_t>(t.begin) * elem,
                static_cast<size_t>(t.count) * elem);
  });
}

OffloadTraffic OffloadOptimizer::traffic() const {
  return {copier_.device_to_host_bytes(), copier_.host_to_device_bytes(), store_->bytes_read(),
          store_->bytes_written(), store_->bytes_on_nvme()};
}

}  // namespace zt

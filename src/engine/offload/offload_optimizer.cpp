#include "engine/offload/offload_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

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
      copier_(copier),
      worker_(config.host_adam_cpus) {
  const MemoryPlan planned = plan(config, own_sizes_, precision_);
  for (size_t g = 0; g < own_sizes_.size(); ++g) {
    const int i = static_cast<int>(g);
    host_grads_.push_back(allocate_planned<float>(memory, planned, BufferRole::kHostGradients, i));
    if (config.delay > 0)
      pending_grads_.push_back(
          allocate_planned<float>(memory, planned, BufferRole::kPendingGradients, i));
    // Pageable: the kept state never crosses to the device (a GPU backend's host pool is pinned).
    kept_state_.push_back(
        allocate_planned<float>(memory, planned, BufferRole::kKeptState, i, &host_device_memory()));
    // Nothing kept (a limit below the group that lands first): the steps run as without overlap.
    overlap_configured_ |= kept_state_.back().size() > 0;
  }
  tile_ = offload_tile(config, own_sizes_);
  for (int k = 0; k < 2; ++k)
    staging_[static_cast<size_t>(k)] =
        allocate_planned<uint8_t>(memory, planned, BufferRole::kHostStaging, k);
  if (config.optimizer == OffloadDevice::kNvme)
    store_ = make_nvme_state_store(own_sizes_, tile_, static_cast<int>(config.buffer_count),
                                   config.nvme_path, host_comm, memory);
  else
    store_ = make_host_state_store(own_sizes_, tile_, memory);
}

int64_t offload_tile(const OffloadConfig& config, const std::vector<int64_t>& own_sizes) {
  int64_t max_own = 1;
  for (int64_t n : own_sizes) max_own = std::max(max_own, n);
  return std::min(config.sub_group_size, max_own);
}

MemoryPlan OffloadOptimizer::plan(const OffloadConfig& config,
                                  const std::vector<int64_t>& own_sizes, Precision precision) {
  MemoryPlan p;
  const int G = static_cast<int>(own_sizes.size());
  for (int g = 0; g < G; ++g) {
    const int64_t n = own_sizes[static_cast<size_t>(g)];
    p.add(BufferRole::kHostGradients, g, MemCategory::kHostOffload, 4 * n);
    if (config.delay > 0) p.add(BufferRole::kPendingGradients, g, MemCategory::kHostOffload, 4 * n);
  }
  // The kept state of the groups that land first (the backward goes from the last group down)
  // while they fit in overlap_bytes; none for the rest, which wait for the norm.
  int64_t budget =
      config.overlap_bytes < 0 ? std::numeric_limits<int64_t>::max() : config.overlap_bytes;
  for (int g = G; config.keeps_speculated_state() && g-- > 0;) {
    const int64_t bytes = 12 * own_sizes[static_cast<size_t>(g)];
    if (bytes == 0) continue;
    if (bytes > budget) break;
    budget -= bytes;
    p.add(BufferRole::kKeptState, g, MemCategory::kHostOffload, bytes);
  }
  const int64_t tile = offload_tile(config, own_sizes);
  const auto elem = static_cast<int64_t>(dtype_size(working_dtype(precision)));
  for (int k = 0; k < 2; ++k)
    p.add(BufferRole::kHostStaging, k, MemCategory::kHostOffload, tile * elem);
  if (config.optimizer == OffloadDevice::kNvme) {
    p.add(BufferRole::kNvmeBuffers, -1, MemCategory::kHostOffload,
          config.buffer_count * nvme_swap_buffer_bytes(tile));
    p.add(BufferRole::kNvmeFile, -1, MemCategory::kNvme, nvme_file_bytes(own_sizes, tile));
  } else {
    for (int g = 0; g < G; ++g)
      p.add(BufferRole::kHostOptimizer, g, MemCategory::kHostOffload,
            12 * own_sizes[static_cast<size_t>(g)]);
  }
  return p;
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
  if (!speculation_.open) return;
  speculation_.landing.emplace_back(g, copier_.mark());
  hand_over_landed(/*wait=*/false);
}

void OffloadOptimizer::begin_overlap(AdamWHyper h, float weight_decay) {
  ZT_CHECK(!delayed_running_, "OffloadOptimizer::begin_overlap: a delayed update is running");
  roll_back_overlap();
  if (!overlap_configured_) return;
  speculation_.open = true;
  speculation_.h = h;
  speculation_.weight_decay = weight_decay;
  speculation_.kept.assign(own_sizes_.size(), 0);
  speculation_.timing = {};
  speculation_.handed_params = 0;
  speculation_.cancelled = false;
}

void OffloadOptimizer::poll_overlap() {
  if (speculation_.open) hand_over_landed(/*wait=*/false);
}

void OffloadOptimizer::hand_over_landed(bool wait) {
  auto& landing = speculation_.landing;
  while (!landing.empty()) {
    const auto [g, mark] = landing.front();
    if (wait)
      copier_.synchronize_until(mark);
    else if (!copier_.done_until(mark))
      return;
    landing.pop_front();
    // A group without kept state (beyond overlap_bytes) is updated after the norm.
    if (kept_state_[static_cast<size_t>(g)].size() == 0) continue;
    if (!wait) speculation_.handed_params += own_sizes_[static_cast<size_t>(g)];
    worker_.submit([this, g = g] { speculate_group(g); });
  }
}

void OffloadOptimizer::copy_kept_state(int g, bool keep) {
  const size_t i = static_cast<size_t>(g);
  const OptimizerShard state = store_->resident(g);  // the host store: its own buffers
  const size_t bytes = static_cast<size_t>(own_sizes_[i]) * sizeof(float);
  float* kept = kept_state_[i].data();
  float* const live[3] = {state.master, state.m, state.v};
  for (size_t k = 0; k < 3; ++k) {
    float* copy = kept + k * static_cast<size_t>(own_sizes_[i]);
    if (keep)
      std::memcpy(copy, live[k], bytes);
    else
      std::memcpy(live[k], copy, bytes);
  }
}

void OffloadOptimizer::speculate_group(int g) {
  if (speculation_.cancelled) return;  // a roll-back waits for no update it would undo
  const size_t i = static_cast<size_t>(g);
  copy_kept_state(g, /*keep=*/true);
  speculation_.kept[i] = 1;  // read by the main thread only after wait_idle()
  update_group(g, speculation_.h, speculation_.weight_decay, host_grads_[i].data(),
               speculation_.timing);
}

bool OffloadOptimizer::commit_overlap(AdamWHyper h, float weight_decay,
                                      const std::function<void*(int g)>& work_out) {
  ZT_CHECK(speculation_.open, "OffloadOptimizer::commit_overlap: no overlap open");
  // The same bits, field by field (== would take -0 for +0).
  const auto bits = [](float x) {
    uint32_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
  };
  const AdamWHyper& s = speculation_.h;
  const bool same = bits(h.lr) == bits(s.lr) && bits(h.beta1) == bits(s.beta1) &&
                    bits(h.beta2) == bits(s.beta2) && bits(h.eps) == bits(s.eps) &&
                    h.step == s.step && bits(h.grad_scale) == bits(s.grad_scale) &&
                    bits(weight_decay) == bits(speculation_.weight_decay);
  if (!same) {
    roll_back_overlap();
    return false;
  }
  hand_over_landed(/*wait=*/true);
  worker_.wait_idle();
  speculation_.open = false;
  // The groups it did not speculate on: updated now, with the same hyperparameters.
  copier_.synchronize();
  speculated_params_ = speculation_.handed_params;
  for (size_t i = 0; i < own_sizes_.size(); ++i)
    if (!speculation_.kept[i] && !segments_[i].empty())
      update_group(static_cast<int>(i), h, weight_decay, host_grads_[i].data(),
                   speculation_.timing);
  last_adam_ = speculation_.timing;
  publish(work_out);
  return true;
}

void OffloadOptimizer::roll_back_overlap() {
  if (!speculation_.open) return;
  speculation_.open = false;
  speculation_.landing.clear();
  speculation_.cancelled = true;  // the queued groups not started are left as they are
  std::exception_ptr error;
  try {
    worker_.wait_idle();
  } catch (...) {
    error = std::current_exception();  // after the state is back
  }
  for (size_t i = 0; i < own_sizes_.size(); ++i)
    if (speculation_.kept[i]) copy_kept_state(static_cast<int>(i), /*keep=*/false);
  if (error) std::rethrow_exception(error);
}

void OffloadOptimizer::step(AdamWHyper h, float weight_decay,
                            const std::function<void*(int g)>& work_out) {
  copier_.synchronize();  // every gradient shard is on the host
  update_tiles(h, weight_decay, host_grads_, &work_out);
  copier_.synchronize();  // every updated tile is on the device before the params are used
}

void OffloadOptimizer::start_update(AdamWHyper h, float weight_decay) {
  ZT_CHECK(!pending_grads_.empty() && !delayed_running_ && !speculation_.open,
           "OffloadOptimizer::start_update: no delay configured, or an update still running");
  copier_.synchronize();  // every gradient shard is on the host
  std::swap(host_grads_, pending_grads_);
  delayed_running_ = true;
  worker_.submit(
      [this, h, weight_decay] { update_tiles(h, weight_decay, pending_grads_, nullptr); });
}

bool OffloadOptimizer::finish_update() {
  if (!delayed_running_) return false;
  delayed_running_ = false;
  worker_.wait_idle();
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

void OffloadOptimizer::adam_tile(const StateTile& t, AdamWHyper h, float weight_decay,
                                 const float* grads, bf16_t* out_bf16, float* out_f32,
                                 uint16_t* out_fp16, AdamTiming& timing) {
  const cpu::AdamSimd path = cpu::best_adam_simd();
  for (const DecaySegment& s : segments_[static_cast<size_t>(t.group)]) {
    const int64_t lo = std::max(s.begin, t.begin), hi = std::min(s.end, t.begin + t.count);
    if (lo >= hi) continue;
    const int64_t at = lo - t.begin;
    h.weight_decay = s.decay ? weight_decay : 0.0f;
    const auto start = std::chrono::steady_clock::now();
    cpu::adam_update(path, t.master + at, t.m + at, t.v + at, grads + lo,
                     out_bf16 ? out_bf16 + at : nullptr, out_f32 ? out_f32 + at : nullptr, hi - lo,
                     h);
    timing.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    timing.params += hi - lo;
    // fp16: the updated masters, rounded (the Adam kernels write bf16 or fp32 only).
    if (out_fp16) floats_to_fp16(t.master + at, out_fp16 + at, static_cast<size_t>(hi - lo));
  }
}

void OffloadOptimizer::update_group(int g, const AdamWHyper& h, float weight_decay,
                                    const float* grads, AdamTiming& timing) {
  const OptimizerShard state = store_->resident(g);
  const int64_t n = own_sizes_[static_cast<size_t>(g)];
  // The tiles step() visits, so that each kernel call covers the same elements.
  for (int64_t b = 0; b < n; b += tile_) {
    const StateTile t{g, b, std::min(tile_, n - b), state.master + b, state.m + b, state.v + b};
    adam_tile(t, h, weight_decay, grads, nullptr, nullptr, nullptr, timing);
  }
}

void OffloadOptimizer::update_tiles(AdamWHyper h, float weight_decay,
                                    const std::vector<TrackedBuffer<float>>& grads_of,
                                    const std::function<void*(int g)>* work_out) {
  const DType work = working_dtype(precision_);
  const bool bf16 = work == DType::kBf16, fp16 = work == DType::kFloat16;
  const size_t elem = dtype_size(work);
  size_t tile_index = 0;
  AdamTiming timing;
  store_->update_tiles([&](const StateTile& t) {
    const size_t slot = tile_index++ % staging_.size();
    uint8_t* staging = staging_[slot].data();
    // The copy that last read this staging tile (two tiles ago) must be done before the rewrite;
    // the previous tile's copy keeps running under this tile's update.
    if (work_out && tile_index > staging_.size()) copier_.synchronize_until(staging_copied_[slot]);
    const float* grads = grads_of[static_cast<size_t>(t.group)].data();
    // Frozen tensors have no segment (decay_segments.h): the tile goes out whole, so their part
    // of it is their master as working params, which is what the device holds already.
    if (work_out && !covers(segments_[static_cast<size_t>(t.group)], t.begin, t.count)) {
      if (bf16 || fp16)
        round_16bit(work, t.master, reinterpret_cast<uint16_t*>(staging),
                    static_cast<size_t>(t.count));
      else
        std::memcpy(staging, t.master, static_cast<size_t>(t.count) * sizeof(float));
    }
    // Without work_out (a delayed update) only the masters and moments change.
    adam_tile(t, h, weight_decay, grads,
              work_out && bf16 ? reinterpret_cast<bf16_t*>(staging) : nullptr,
              work_out && !bf16 && !fp16 ? reinterpret_cast<float*>(staging) : nullptr,
              work_out && fp16 ? reinterpret_cast<uint16_t*>(staging) : nullptr, timing);
    if (work_out)
      send_tile(slot,
                static_cast<uint8_t*>((*work_out)(t.group)) + static_cast<size_t>(t.begin) * elem,
                static_cast<size_t>(t.count) * elem);
  });
  last_adam_ = timing;
}

OffloadTraffic OffloadOptimizer::traffic() const {
  return {copier_.device_to_host_bytes(), copier_.host_to_device_bytes(), store_->bytes_read(),
          store_->bytes_written(), store_->bytes_on_nvme()};
}

}  // namespace zt

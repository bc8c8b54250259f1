#include "engine/offload/offload_optimizer.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_adam.h"
#include "engine/offload/nvme_swapper.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/stopwatch.h"
#include "util/tensor_view.h"

namespace zt {

OffloadOptimizer::OffloadOptimizer(const OffloadConfig& config, std::vector<int64_t> own_sizes,
                                   std::vector<std::vector<DecaySegment>> segments,
                                   Precision precision, MemoryTracker& memory,
                                   Communicator& host_comm, HostDeviceCopier& copier,
                                   Backend& device)
    : own_sizes_(std::move(own_sizes)),
      segments_(std::move(segments)),
      precision_(precision),
      device_(device),
      bf16_grads_(config.bf16_gradient_copies),
      params_on_host_(config.param_offloaded()),
      copier_(copier),
      worker_(config.host_adam_cpus) {
  const MemoryPlan planned = plan(config, own_sizes_, precision_);
  for (size_t g = 0; g < own_sizes_.size(); ++g) {
    const int i = static_cast<int>(g);
    host_grads_.push_back(
        allocate_planned<uint8_t>(memory, planned, BufferRole::kHostGradients, i));
    if (config.delay > 0)
      pending_grads_.push_back(
          allocate_planned<uint8_t>(memory, planned, BufferRole::kPendingGradients, i));
    // Pageable: the kept state never crosses to the device (a GPU backend's host pool is pinned).
    kept_state_.push_back(
        allocate_planned<float>(memory, planned, BufferRole::kKeptState, i, &host_device_memory()));
    speculated_values_.push_back(
        allocate_planned<uint8_t>(memory, planned, BufferRole::kSpeculatedValues, i));
    // Nothing kept (a limit below the group that lands first): the steps run as without overlap.
    overlap_configured_ |= kept_state_.back().size() > 0;
  }
  tile_ = offload_tile(config, own_sizes_);
  for (int k = 0; k < 2; ++k) {
    staging_[static_cast<size_t>(k)] =
        allocate_planned<uint8_t>(memory, planned, BufferRole::kHostStaging, k);
    grad_copy_staging_[static_cast<size_t>(k)] =
        allocate_planned<bf16_t>(memory, planned, BufferRole::kGradCopyStaging, k);
  }
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
  const int64_t grad_elem = config.bf16_gradient_copies ? 2 : 4;
  int64_t max_own = 0;
  for (int g = 0; g < G; ++g) {
    const int64_t n = own_sizes[static_cast<size_t>(g)];
    max_own = std::max(max_own, n);
    p.add(BufferRole::kHostGradients, g, MemCategory::kHostOffload, grad_elem * n);
    if (config.delay > 0)
      p.add(BufferRole::kPendingGradients, g, MemCategory::kHostOffload, grad_elem * n);
  }
  // bf16 copies: two device buffers of the largest shard, rounded into in turn.
  for (int k = 0; k < 2 && config.bf16_gradient_copies; ++k)
    p.add(BufferRole::kGradCopyStaging, k, MemCategory::kCommBuffers, 2 * max_own);
  // The kept state and the speculated working values (which cross to the device) of the groups
  // that land first (the backward goes from the last group down) while they fit in overlap_bytes;
  // none for the rest, which wait for the norm.
  const auto elem = static_cast<int64_t>(dtype_size(working_dtype(precision)));
  int64_t budget =
      config.overlap_bytes < 0 ? std::numeric_limits<int64_t>::max() : config.overlap_bytes;
  for (int g = G; config.keeps_speculated_state() && g-- > 0;) {
    const int64_t n = own_sizes[static_cast<size_t>(g)];
    if (n == 0) continue;
    if ((12 + elem) * n > budget) break;
    budget -= (12 + elem) * n;
    p.add(BufferRole::kKeptState, g, MemCategory::kHostOffload, 12 * n);
    p.add(BufferRole::kSpeculatedValues, g, MemCategory::kHostOffload, elem * n);
  }
  const int64_t tile = offload_tile(config, own_sizes);
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

// cpu::adam_update over n gradients in the copies' dtype (bf16, or fp32), from element `at` of
// `grads`.
void adam_on_copies(bool bf16, cpu::AdamSimd path, float* master, float* m, float* v,
                    const void* grads, int64_t at, bf16_t* out_bf16, float* out_f32, int64_t n,
                    const AdamWHyper& h) {
  if (bf16)
    cpu::adam_update(path, master, m, v, static_cast<const bf16_t*>(grads) + at, out_bf16, out_f32,
                     n, h);
  else
    cpu::adam_update(path, master, m, v, static_cast<const float*>(grads) + at, out_bf16, out_f32,
                     n, h);
}

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
  if (bf16_grads_) {
    // The device rounds the shard into a staging buffer, then it crosses to the host: ordered
    // after the rounding on the device (the copier's copies follow the device's compute).
    const size_t slot = grad_copies_issued_++ % grad_copy_staging_.size();
    // The rounding into this buffer waits, on the device, for the copy that last read it.
    if (grad_copies_issued_ > grad_copy_staging_.size())
      copier_.order_device_after(grad_copy_done_[slot]);
    bf16_t* staged = grad_copy_staging_[slot].data();
    device_.to_bf16(staged, device_grads, own_sizes_[i]);
    copier_.device_to_host(host_grads_[i].data(), staged, host_grads_[i].bytes());
    grad_copy_done_[slot] = copier_.mark();
  } else {
    copier_.device_to_host(host_grads_[i].data(), device_grads, host_grads_[i].bytes());
  }
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
  speculation_.handed.clear();
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
    speculation_.handed.emplace_back(g, worker_.submit([this, g = g] { speculate_group(g); }));
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
  speculation_.kept[i] = 1;  // read by the main thread after waiting for this task
  update_group(g, speculation_.h, speculation_.weight_decay, host_grads_[i].data(),
               speculation_.timing, speculated_values_[i].data());
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
  const uint64_t gradients_copied = copier_.mark();  // every shard's copy has been issued
  hand_over_landed(/*wait=*/true);
  // Still open until the worker is done: an error in a wait below leaves the overlap for the
  // caller's roll_back_overlap(), which waits for the worker and puts the kept state back (the
  // groups already sent keep their new values on the device; an error ends training).
  speculated_params_ = speculation_.handed_params;
  // Each speculated group's working values go out as soon as its update is done, while the host
  // thread updates the next groups.
  for (const auto& [g, ticket] : speculation_.handed) {
    worker_.wait_for(ticket);
    const size_t i = static_cast<size_t>(g);
    if (speculation_.kept[i])
      send(work_out(g), speculated_values_[i].data(), speculated_values_[i].bytes());
  }
  worker_.wait_idle();
  speculation_.open = false;
  // The groups it did not speculate on: updated now, with the same hyperparameters, tile by tile
  // through the staging tiles.
  copier_.synchronize_until(gradients_copied);
  size_t tile_index = 0;
  for (size_t i = 0; i < own_sizes_.size(); ++i) {
    if (speculation_.kept[i] || segments_[i].empty()) continue;
    for_each_resident_tile(static_cast<int>(i), [&](const StateTile& t) {
      update_and_send_tile(t, h, weight_decay, host_grads_[i].data(), work_out, tile_index,
                           speculation_.timing);
    });
  }
  last_adam_ = speculation_.timing;
  copier_.synchronize();  // every updated value is on the device before the params are used
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

void OffloadOptimizer::send(void* out, const void* values, size_t bytes) {
  if (params_on_host_)
    std::memcpy(out, values, bytes);
  else
    copier_.host_to_device(out, values, bytes);
}

void OffloadOptimizer::send_tile(size_t slot, void* out, size_t bytes) {
  send(out, staging_[slot].data(), bytes);
  if (!params_on_host_) staging_copied_[slot] = copier_.mark();
}

void OffloadOptimizer::publish(const std::function<void*(int g)>& work_out) {
  const size_t elem = dtype_size(working_dtype(precision_));
  size_t tile_index = 0;
  store_->update_tiles([&](const StateTile& t) {
    if (segments_[static_cast<size_t>(t.group)].empty()) return;  // a frozen group: unchanged
    const size_t slot = next_staging_slot(tile_index);
    write_working_values(t.master, t.count, staging_[slot].data());
    send_tile(slot, static_cast<uint8_t*>(work_out(t.group)) + static_cast<size_t>(t.begin) * elem,
              static_cast<size_t>(t.count) * elem);
  });
  copier_.synchronize();
}

size_t OffloadOptimizer::next_staging_slot(size_t& tile_index) {
  const size_t slot = tile_index++ % staging_.size();
  // The copy that last read this staging tile (two tiles ago) must be done before the rewrite;
  // the previous tile's copy keeps running under this tile's work.
  if (tile_index > staging_.size()) copier_.synchronize_until(staging_copied_[slot]);
  return slot;
}

void OffloadOptimizer::write_working_values(const float* master, int64_t count, uint8_t* out) {
  const DType work = working_dtype(precision_);
  if (work == DType::kFloat32)
    std::memcpy(out, master, static_cast<size_t>(count) * sizeof(float));
  else
    round_16bit(work, master, reinterpret_cast<uint16_t*>(out), static_cast<size_t>(count));
}

void OffloadOptimizer::adam_tile(const StateTile& t, AdamWHyper h, float weight_decay,
                                 const uint8_t* grads, bf16_t* out_bf16, float* out_f32,
                                 uint16_t* out_fp16, AdamTiming& timing) {
  const cpu::AdamSimd path = cpu::best_adam_simd();
  for (const DecaySegment& s : segments_[static_cast<size_t>(t.group)]) {
    const int64_t lo = std::max(s.begin, t.begin), hi = std::min(s.end, t.begin + t.count);
    if (lo >= hi) continue;
    const int64_t at = lo - t.begin;
    h.weight_decay = s.decay ? weight_decay : 0.0f;
    const Stopwatch clock;
    bf16_t* const bf16_out = out_bf16 ? out_bf16 + at : nullptr;
    float* const f32_out = out_f32 ? out_f32 + at : nullptr;
    adam_on_copies(bf16_grads_, path, t.master + at, t.m + at, t.v + at, grads, lo, bf16_out,
                   f32_out, hi - lo, h);
    timing.seconds += clock.seconds();
    timing.params += hi - lo;
    // fp16: the updated masters, rounded (the Adam kernels write bf16 or fp32 only).
    if (out_fp16) floats_to_fp16(t.master + at, out_fp16 + at, static_cast<size_t>(hi - lo));
  }
}

void OffloadOptimizer::update_tile(const StateTile& t, const AdamWHyper& h, float weight_decay,
                                   const uint8_t* grads, uint8_t* values, AdamTiming& timing) {
  const DType work = working_dtype(precision_);
  // Frozen tensors have no segment (decay_segments.h): their part of the tile is their master
  // as working values, which is what the device holds already.
  if (values && !covers(segments_[static_cast<size_t>(t.group)], t.begin, t.count))
    write_working_values(t.master, t.count, values);
  adam_tile(t, h, weight_decay, grads,
            values && work == DType::kBf16 ? reinterpret_cast<bf16_t*>(values) : nullptr,
            values && work == DType::kFloat32 ? reinterpret_cast<float*>(values) : nullptr,
            values && work == DType::kFloat16 ? reinterpret_cast<uint16_t*>(values) : nullptr,
            timing);
}

void OffloadOptimizer::update_and_send_tile(const StateTile& t, const AdamWHyper& h,
                                            float weight_decay, const uint8_t* grads,
                                            const std::function<void*(int g)>& work_out,
                                            size_t& tile_index, AdamTiming& timing) {
  const size_t elem = dtype_size(working_dtype(precision_));
  const size_t slot = next_staging_slot(tile_index);
  update_tile(t, h, weight_decay, grads, staging_[slot].data(), timing);
  send_tile(slot, static_cast<uint8_t*>(work_out(t.group)) + static_cast<size_t>(t.begin) * elem,
            static_cast<size_t>(t.count) * elem);
}

void OffloadOptimizer::for_each_resident_tile(int g,
                                              const std::function<void(const StateTile&)>& fn) {
  const OptimizerShard state = store_->resident(g);
  const int64_t n = own_sizes_[static_cast<size_t>(g)];
  // The tiles step() visits, so that each kernel call covers the same elements.
  for (int64_t b = 0; b < n; b += tile_)
    fn({g, b, std::min(tile_, n - b), state.master + b, state.m + b, state.v + b});
}

void OffloadOptimizer::update_group(int g, const AdamWHyper& h, float weight_decay,
                                    const uint8_t* grads, AdamTiming& timing, uint8_t* values) {
  const size_t elem = dtype_size(working_dtype(precision_));
  for_each_resident_tile(g, [&](const StateTile& t) {
    update_tile(t, h, weight_decay, grads,
                values ? values + static_cast<size_t>(t.begin) * elem : nullptr, timing);
  });
}

void OffloadOptimizer::update_tiles(AdamWHyper h, float weight_decay,
                                    const std::vector<TrackedBuffer<uint8_t>>& grads_of,
                                    const std::function<void*(int g)>* work_out) {
  size_t tile_index = 0;
  AdamTiming timing;
  store_->update_tiles([&](const StateTile& t) {
    const uint8_t* grads = grads_of[static_cast<size_t>(t.group)].data();
    // Without work_out (a delayed update) only the masters and moments change.
    if (work_out)
      update_and_send_tile(t, h, weight_decay, grads, *work_out, tile_index, timing);
    else
      update_tile(t, h, weight_decay, grads, nullptr, timing);
  });
  last_adam_ = timing;
}

double OffloadOptimizer::measure_adam_rate(int64_t elements) {
  ZT_CHECK(elements > 0 && !delayed_running_ && !speculation_.open,
           "OffloadOptimizer::measure_adam_rate: at start-up, over some elements");
  const DType work = working_dtype(precision_);
  double best = 0;
  worker_.submit([&best, elements, work, bf16_grads = bf16_grads_] {
    const size_t n = static_cast<size_t>(elements);
    std::vector<float> master(n, 0.5f), m(n, 0.0f), v(n, 0.0f);
    std::vector<float> grad(bf16_grads ? 0 : n, 1e-3f);
    std::vector<bf16_t> grad_bf16(bf16_grads ? n : 0, float_to_bf16(1e-3f));
    std::vector<float> out_f32(work == DType::kFloat32 ? n : 0);
    std::vector<uint16_t> out_16bit(work == DType::kFloat32 ? 0 : n);
    const cpu::AdamSimd path = cpu::best_adam_simd();
    AdamWHyper h;
    for (int pass = 0; pass < 3; ++pass) {
      h.step = pass + 1;
      const Stopwatch clock;
      // The outputs adam_tile writes: bf16 or fp32 by the kernel, fp16 rounded after it.
      bf16_t* const bf16_out = work == DType::kBf16 ? out_16bit.data() : nullptr;
      float* const f32_out = work == DType::kFloat32 ? out_f32.data() : nullptr;
      // The gradients as the copies leave them.
      const void* grads = bf16_grads ? static_cast<const void*>(grad_bf16.data()) : grad.data();
      adam_on_copies(bf16_grads, path, master.data(), m.data(), v.data(), grads, 0, bf16_out,
                     f32_out, elements, h);
      if (work == DType::kFloat16) floats_to_fp16(master.data(), out_16bit.data(), n);
      const double seconds = clock.seconds();
      if (pass > 0 && seconds > 0) best = std::max(best, static_cast<double>(elements) / seconds);
    }
  });
  worker_.wait_idle();
  return best;
}

OffloadTraffic OffloadOptimizer::traffic() const {
  return {copier_.device_to_host_bytes(), copier_.host_to_device_bytes(), store_->bytes_read(),
          store_->bytes_written(), store_->bytes_on_nvme()};
}

}  // namespace zt

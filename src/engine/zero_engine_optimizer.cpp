// ZeroEngine's optimizer step (docs/ARCHITECTURE.md §3, step 4): the global gradient norm, fp16's
// skip, clipping, AdamW on the rank's own ranges (on the device, or the CPU Adam of optimizer
// offload), the delayed parameter update, and the stage 1/2 all-gather of the updated params.
#include <algorithm>
#include <cmath>

#include "engine/zero_engine_impl.h"
#include "util/bf16.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

std::string learning_rate_hint(float last_update_lr) {
  if (last_update_lr < 0) return "";
  return " (the previous update's learning rate was " + shortest_decimal(last_update_lr) +
         ": a rate too high for the model diverges; see --lr and the schedule)";
}

void ZeroEngine::Impl::stop_unless_steppable(double grad_norm, int64_t step, bool copy_overflowed) {
  if (copy_overflowed) {
    offloader->roll_back_overlap();  // the state stays that of the last update
    throw AgreedError("the gradient norm is " + std::to_string(grad_norm) + " at step " +
                      std::to_string(step) +
                      ", past what bf16 gradient copies hold (an element may have rounded to "
                      "infinity on its way to the host); training stopped before the update "
                      "(--offload-gradient-copies fp32 copies the gradients exactly)" +
                      learning_rate_hint(last_update_lr));
  }
  if (std::isfinite(grad_norm)) return;
  if (offloader) offloader->roll_back_overlap();  // the state stays that of the last update
  const int64_t t = first_non_finite_tensor(/*gradients=*/true);
  const ParamLayout& layout = self.model_.layout();
  throw AgreedError(
      "the gradient norm is " + std::to_string(grad_norm) + " at step " + std::to_string(step) +
      (t < 0 ? std::string()
             : ": the first non-finite gradient is in " +
                   layout.tensors()[static_cast<size_t>(t)].name + " (parameter group " +
                   std::to_string(layout.tensors()[static_cast<size_t>(t)].group) + ")") +
      "; training stopped before the update" + learning_rate_hint(last_update_lr));
}

void ZeroEngine::Impl::optimizer_step(float lr, int64_t step, StepStats& stats) {
  const PhaseTimeline::Mark phase = intervals.begin();
  set_phase(step, "optimizer");
  // Exact offload overlap: the copies that landed since the last group's reduction go to the
  // host thread before the norm, so that their AdamW runs under it.
  if (offloader) offloader->poll_overlap();
  stats.grad_norm = gradient_norm();
  // Delayed update: the update held back since the last step becomes the weights the next step
  // computes on, whatever this step decides (after the norm, whose reduction the host thread's
  // last tiles overlap).
  const bool published = publish_delayed_update(&stats);
  // bf16 gradient copies: only a norm this large can hold an element that went to the host as
  // infinity (its fp32 gradient finite). fp16 skips the step; otherwise training stops below.
  const bool copy_overflowed =
      offload.bf16_gradient_copies && stats.grad_norm >= static_cast<double>(kBf16RoundsToInfinity);
  if (scaler) {
    // fp16: the gradients carry the loss scale S. Every rank sees the same reduced norm (and
    // loss), so the overflow decision is agreed; DeepSpeed updates the scale before stepping.
    const double S = scaler->scale();
    const bool overflow =
        !std::isfinite(stats.grad_norm) || !std::isfinite(stats.loss) || copy_overflowed;
    stats.loss_scale = S;
    try {
      scaler->update(overflow, step);
    } catch (const Error& e) {
      throw AgreedError(e.what() + learning_rate_hint(last_update_lr));
    }
    if (overflow) {
      stats.skipped = true;
      skipped_steps += 1;
      if (offloader) {
        offloader->roll_back_overlap();  // the speculated update is undone
        copier->synchronize();           // the gradient copies already issued land unused
      }
      intervals.end(StepIntervals::kOptimizer, phase);
      if (published && traits.gather_after_update) gather_updated_params(/*every_group=*/false);
      if (traits.shard_parameters) gatherer->release_all();
      return;
    }
    stats.grad_norm /= S;
  }
  stop_unless_steppable(stats.grad_norm, step, copy_overflowed);
  stats.clip_scale = (optim.clip > 0 && stats.grad_norm > optim.clip)
                         ? optim.clip / (stats.grad_norm + 1e-6)
                         : 1.0;
  // fp16: the unscaling (1/S) folds into the factor the optimizer applies to the gradients.
  const double unscale = scaler ? 1.0 / stats.loss_scale : 1.0;
  AdamWHyper h =
      adamw_hyper(optim, lr, step - skipped_steps, static_cast<float>(stats.clip_scale * unscale));
  auto work_out = [&](int g) { return own_working(g); };
  const bool delayed = offload.delayed_update(step);
  if (offloader) {
    const OffloadTraffic before = offloader->traffic();
    if (delayed) {
      offloader->start_update(h, optim.weight_decay);  // published by the next step
    } else if (offloader->overlap_open()) {
      // Kept when the step is what was speculated (no clipping); else undone and run again.
      const bool kept = offloader->commit_overlap(h, optim.weight_decay, work_out);
      stats.host_adam_speculation = kept ? "kept" : "redone";
      if (kept) stats.host_adam_speculated_params = offloader->speculated_params();
      if (!kept) offloader->step(h, optim.weight_decay, work_out);
    } else {
      offloader->step(h, optim.weight_decay, work_out);
    }
    const OffloadTraffic after = offloader->traffic();
    stats.nvme_read_bytes = after.nvme_read - before.nvme_read;
    stats.nvme_write_bytes = after.nvme_written - before.nvme_written;
    stats.nvme_resident_bytes = after.nvme_resident;
    if (!delayed) {
      stats.host_adam_params = offloader->last_adam().params;
      stats.host_adam_s = offloader->last_adam().seconds;
    }
  } else if (delayed) {
    // The update's working values wait one step in delayed_work (publish_delayed_update).
    device_adamw(h, [&](int g) { return delayed_fresh[static_cast<size_t>(g)].data(); });
    std::swap(delayed_work, delayed_fresh);
    delayed_held = true;
  } else {
    device_adamw(h, work_out);
  }
  intervals.end(StepIntervals::kOptimizer, phase);
  // A delayed step changed the working params only where it published the update before.
  if (traits.gather_after_update && (published || !delayed))
    gather_updated_params(/*every_group=*/false);
  if (traits.shard_parameters) gatherer->release_all();
}

void ZeroEngine::Impl::begin_offload_overlap(float lr, int64_t step) {
  // optimizer_step's hyperparameters when nothing clips or skips: clip factor 1, fp16's 1/S.
  const double unscale = scaler ? 1.0 / scaler->scale() : 1.0;
  offloader->begin_overlap(
      adamw_hyper(optim, lr, step - skipped_steps, static_cast<float>(unscale)),
      optim.weight_decay);
}

void ZeroEngine::Impl::device_adamw(AdamWHyper h, const std::function<uint8_t*(int g)>& out_of) {
  // offload_param without optimizer offload: the update lands in a device tile, then the host.
  TrackedBuffer<uint8_t> device_out;
  for (int g = 0; g < num_groups(); ++g) {
    if (!trains(g)) continue;
    const int64_t begin = own_begin(g);
    const size_t out_bytes = static_cast<size_t>(own_size(g)) * work_elem();
    if (offload.param_offloaded() && device_out.size() < out_bytes) {
      device_out.reset();  // the larger tile replaces it: the two are never held at once
      device_out = TrackedBuffer<uint8_t>(memory, MemCategory::kCommBuffers, out_bytes);
    }
    uint8_t* out_base = offload.param_offloaded() ? device_out.data() : out_of(g);
    const std::vector<DecaySegment> segments = own_segments(g);
    int64_t updated = 0;
    for (const DecaySegment& s : segments) updated += s.end - s.begin;
    // The tile goes back whole: frozen tensors, which have no segment, must carry their values.
    if (offload.param_offloaded() && updated < own_size(g))
      dev.to_device(device_out.data(), out_of(g), out_bytes);
    for (const DecaySegment& s : segments) {
      const int64_t i = s.begin - begin;
      h.weight_decay = s.decay ? optim.weight_decay : 0.0f;
      uint8_t* out = out_base + static_cast<size_t>(i) * work_elem();
      be.adamw(master[static_cast<size_t>(g)].data() + i, adam_m[static_cast<size_t>(g)].data() + i,
               adam_v[static_cast<size_t>(g)].data() + i, own_grads(g) + i,
               work_dtype() == DType::kBf16 ? reinterpret_cast<bf16_t*>(out) : nullptr,
               half() ? nullptr : reinterpret_cast<float*>(out), s.end - s.begin, h);
      // fp16: the updated masters, rounded (the Adam kernels write bf16 or fp32 only).
      if (work_dtype() == DType::kFloat16)
        be.to_fp16(reinterpret_cast<uint16_t*>(out), master[static_cast<size_t>(g)].data() + i,
                   s.end - s.begin);
    }
    if (offload.param_offloaded()) {
      copier->device_to_host(out_of(g), device_out.data(), out_bytes);
      copier->synchronize();
    }
  }
}

bool ZeroEngine::Impl::publish_delayed_update(StepStats* stats) {
  auto work_out = [&](int g) { return own_working(g); };
  if (offloader) {
    if (!offloader->finish_update()) return false;
    offloader->publish([&](int g) -> void* { return work_out(g); });
    if (stats) {
      stats->host_adam_params = offloader->last_adam().params;
      stats->host_adam_s = offloader->last_adam().seconds;
    }
    return true;
  }
  if (!delayed_held) return false;
  // The trained segments only: the buffer's frozen parts were never written.
  for (int g = 0; g < num_groups(); ++g) {
    if (!trains(g)) continue;
    for (const DecaySegment& s : own_segments(g)) {
      const size_t at = static_cast<size_t>(s.begin - own_begin(g)) * work_elem();
      dev.copy(work_out(g) + at, delayed_work[static_cast<size_t>(g)].data() + at,
               static_cast<size_t>(s.end - s.begin) * work_elem());
    }
  }
  delayed_held = false;
  return true;
}

// Stages 1/2: every rank updated its shard of the full working params; all-gather them, in
// chunks of at most allgather_bucket_size elements. After an update only the groups that train
// changed; after a checkpoint load (every_group) every rank wrote only its own range of all.
void ZeroEngine::Impl::gather_updated_params(bool every_group) {
  set_phase(comm.step(), "param all-gather");
  const size_t es = work_elem();
  const int64_t per_rank = std::max<int64_t>(1, zero.allgather_bucket_size / world);
  TrackedBuffer<uint8_t> staging;  // one chunk of every rank, when a group needs chunks
  for (int g = 0; g < num_groups(); ++g) {
    if (!every_group && !trains(g)) continue;
    const GroupPartition& p = part(g);
    auto* base = static_cast<uint8_t*>(work(g));
    if (per_rank >= p.shard) {
      CommHandle h = comm.all_gather(work_dtype(), base + rank * p.shard * es, base,
                                     static_cast<size_t>(p.shard));
      // The next forward is ordered after it.
      intervals.time(StepIntervals::kCommWait, [&] { comm.device_wait(h); });
      continue;
    }
    if (staging.size() == 0)
      staging = TrackedBuffer<uint8_t>(memory, MemCategory::kCommBuffers,
                                       static_cast<size_t>(per_rank * world) * es);
    for (int64_t c0 = 0; c0 < p.shard; c0 += per_rank) {
      const int64_t len = std::min(per_rank, p.shard - c0);
      CommHandle h = comm.all_gather(work_dtype(), base + (rank * p.shard + c0) * es,
                                     staging.data(), static_cast<size_t>(len));
      // The copies out of staging come after it.
      intervals.time(StepIntervals::kCommWait, [&] { comm.device_wait(h); });
      for (int r = 0; r < world; ++r)
        dev.copy(base + (r * p.shard + c0) * es, staging.data() + r * len * es,
                 static_cast<size_t>(len) * es);
    }
  }
}

}  // namespace zt

// ZeRO-Offload / ZeRO-Infinity settings (DeepSpeed's zero_optimization.offload_optimizer and
// offload_param, or --offload-optimizer / --offload-param / --nvme-path / ...).
//   optimizer = cpu  (stages 1-3): fp32 master, Adam m and v of the rank's shard live in the host
//                    pool; the reduced gradient shard is copied device→host group by group as its
//                    reduction lands; CPU AdamW (backend/cpu/cpu_adam.h) updates it tile by tile
//                    (sub_group_size elements) and the bf16 result is copied host→device.
//   optimizer = nvme (stages 1-3): as cpu, but master/m/v are swapped between buffer_count
//                    rotating host buffers and a per-rank file under nvme_path.
//   param = cpu      (stage 3): the working param shards live in the host pool and are staged
//                    host→device right before each all-gather.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

enum class OffloadDevice { kNone, kCpu, kNvme };
OffloadDevice parse_offload_device(const std::string& s, const std::string& what);
const char* offload_device_name(OffloadDevice d);

struct OffloadConfig {
  OffloadDevice optimizer = OffloadDevice::kNone;
  OffloadDevice param = OffloadDevice::kNone;
  std::string nvme_path;                   // directory for nvme swap files
  int64_t buffer_count = 4;                // rotating host buffers for nvme swapping (>= 2)
  int64_t sub_group_size = 1'000'000'000;  // optimizer tile (elements), DeepSpeed's default
  // Delayed parameter update (ZeRO-Offload's DPU; no DeepSpeed key): with delay 1, update t of
  // every step t > delay_after is held back one step (with CPU optimizer offload it runs on the
  // host while step t + 1 computes), so from step delay_after + 2 on step t's gradients come
  // from the weights after update t - 2. Without optimizer offload the same updates are held
  // back synchronously.
  int64_t delay = 0;
  int64_t delay_after = 40;
  // Exact overlap (no DeepSpeed key; --offload-optimizer-overlap; train's auto turns it on with
  // a GPU backend): with CPU
  // optimizer offload, each group's AdamW starts on a host thread as soon as its gradient shard is
  // on the host, during the backward, speculating that the step is neither clipped nor skipped;
  // the master, m and v it changes are kept first (host memory as large as the state) and put
  // back when the global norm says clip (the step then reruns with the clipped gradients), skip
  // or stop. Either way bitwise the step without overlap. NVMe and delayed steps run without it.
  bool overlap = true;
  // The host bytes the kept state may take (-1: no limit). Groups are kept in the order their
  // gradients land (the last layers first) while their 12 bytes per element of kept state and
  // their speculated working values (2 or 4 bytes) fit; the others are updated after the norm,
  // as without overlap. `train --offload-optimizer-overlap auto` sets it
  // from the host's available memory.
  int64_t overlap_bytes = -1;
  // The CPUs the host thread of the CPU AdamW (and the OpenMP team it starts) is pinned to;
  // empty: not pinned. train sets it on a GPU backend: one CPU per physical core of the rank's
  // mask, without the core left to the thread that feeds the GPU (runtime/cpu_placement.h).
  std::vector<int> host_adam_cpus;
  // The dtype the reduced gradient shards cross to the host in (no DeepSpeed key;
  // --offload-gradient-copies; train's auto picks bf16 on a GPU backend with bf16 or fp16
  // precision):
  // false, fp32 (the AdamW sees the engine's fp32 gradients, bitwise the step without offload);
  // true, bf16: the device rounds each shard to bf16 (to nearest even) into one of two staging
  // buffers and copies that, half the bytes over the bus and in the host's gradient buffers, and
  // the host AdamW widens it back (exact). The gradient norm, clipping and fp16's overflow check
  // still read the device's fp32 gradients.
  bool bf16_gradient_copies = false;
  bool pin_memory = false;  // accepted: page-locked on a CUDA backend
  bool fast_init = false;   // accepted: no effect (state is initialised in place)

  bool optimizer_offloaded() const { return optimizer != OffloadDevice::kNone; }
  bool param_offloaded() const { return param != OffloadDevice::kNone; }
  // Throws naming the DeepSpeed key and train's option: offload needs stage >= 1, param offload
  // stage 3 and cpu, nvme needs nvme_path, buffer_count >= 2, sub_group_size >= 1; delay is 0
  // or 1, with neither NVMe optimizer offload nor parameter offload; bf16 gradient copies need
  // optimizer offload.
  bool delayed_update(int64_t step) const { return delay > 0 && step > delay_after; }
  // Whether step `step` overlaps its host AdamW with the backward (see `overlap`).
  bool overlapped(int64_t step) const {
    return overlap && optimizer == OffloadDevice::kCpu && !delayed_update(step);
  }
  // Whether the offloaded optimizer keeps the speculated state (host memory: 3 fp32 per element):
  // not when every step is a delayed one.
  bool keeps_speculated_state() const {
    return overlap && optimizer == OffloadDevice::kCpu && !(delay > 0 && delay_after <= 0);
  }
  void validate(int stage) const;
};

}  // namespace zt

// The ZeRO engine's plain value types: how a group is partitioned, a rank's optimizer shard, and
// one step's statistics. Rooms and files that need only these include this header, not
// engine/zero_engine.h.
#pragma once
#include <cstdint>
#include <string>

#include "util/dtype.h"

namespace zt {

// How one group is split: padded = shard·N, rank r owns [r·shard, (r+1)·shard).
struct GroupPartition {
  int64_t numel = 0;
  int64_t padded = 0;
  int64_t shard = 0;

  // A group of `numel` elements over `world` ranks: padded to a multiple of world, equal shards,
  // each a multiple of `align` elements (world-invariant training: whole norm blocks).
  static GroupPartition of(int64_t numel, int64_t world, int64_t align = 1) {
    GroupPartition p;
    p.numel = numel;
    p.shard = ((numel + world - 1) / world + align - 1) / align * align;
    p.padded = p.shard * world;
    return p;
  }
};

struct StepStats {
  double loss = 0.0;         // mean next-token loss over the global batch
  double grad_norm = 0.0;    // global gradient norm before clipping
  double clip_scale = 1.0;   // factor applied to the gradients (after unscaling, fp16)
  double loss_scale = 0.0;   // fp16: the scale this step's loss was multiplied by; 0 otherwise
  bool skipped = false;      // fp16: the gradients overflowed, so the update was skipped
  int64_t tokens = 0;        // tokens in the global batch
  int64_t loss_targets = 0;  // the targets its loss averages over (fewer with a loss mask)
  double forward_s = 0, backward_s = 0, optimizer_s = 0, comm_wait_s = 0;
  // Offload traffic of this step (bytes): device↔host copies, NVMe reads/writes.
  uint64_t offload_d2h_bytes = 0, offload_h2d_bytes = 0, nvme_read_bytes = 0, nvme_write_bytes = 0;
  uint64_t nvme_resident_bytes = 0;  // this rank's optimizer state held on NVMe
  // Optimizer offload: the CPU AdamW of this step on this rank, the elements it updated and the
  // seconds its kernel took (copies and NVMe swaps excluded): the host's parameters/s.
  int64_t host_adam_params = 0;
  double host_adam_s = 0;
  // Exact offload overlap: "kept" (the speculated update stood), "redone" (clipping: undone and
  // run again), or empty (no overlap; an fp16 skip undoes it without an update).
  std::string host_adam_speculation;
  int64_t host_adam_speculated_params = 0;  // "kept": the elements updated before the norm
};

// The optimizer state a rank owns for one group: elements [begin, begin+count) of the group's
// flat (padded) range. Stage 0 owns the whole group (count = numel), stages 1-3 one shard.
struct OptimizerShard {
  float* master = nullptr;
  float* m = nullptr;  // m and v are null for a frozen group (its master: the working values)
  float* v = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
  // A frozen group's values are exact in this type, its working params' (bf16, fp16 or fp32 by
  // the precision): a checkpoint stores them in it. Float32 for a group that trains.
  DType values_dtype = DType::kFloat32;
};

}  // namespace zt

// What a ZeRO stage means, written once (docs/ARCHITECTURE.md §4). Allocation, the training step,
// the optimizer, checkpoint access, offload validation and the memory estimator read these
// fields; nothing else compares stage numbers.
#pragma once
#include <string>

#include "util/error.h"

namespace zt {

// How a step's gradients are reduced over the ranks.
enum class GradReduction {
  kAllReduceAfterLast,           // stage 0: every rank keeps the whole reduced gradient
  kReduceScatterAfterLast,       // stage 1: full accumulators, one reduce-scatter at the end
  kReduceScatterEachMicroBatch,  // stages 2/3: each micro-batch's bucket lands in the shard
};

struct StageTraits {
  int stage = 0;
  // Master weights and Adam moments: the rank's 1/N shard of every group (else the whole group).
  bool shard_optimizer = false;
  // The fp32 gradient accumulator is the rank's shard (else the full padded group).
  bool shard_gradients = false;
  // Working parameters are held as the rank's shard and gathered before each use (else every
  // rank holds them whole).
  bool shard_parameters = false;
  GradReduction reduction = GradReduction::kAllReduceAfterLast;
  // After the optimizer, the updated shards are all-gathered into the full working parameters.
  bool gather_after_update = false;

  bool reduces_each_micro_batch() const {
    return reduction == GradReduction::kReduceScatterEachMicroBatch;
  }

  // The stages there are: 0, 1, 2 and 3 (every range check and every loop over the stages asks
  // this).
  static constexpr int kCount = 4;
  static constexpr const char* kRangeText = "0, 1, 2 or 3";  // for messages
  static_assert(kCount == 4, "kRangeText lists the stages");
  static constexpr bool exists(int64_t stage) { return stage >= 0 && stage < kCount; }

  static StageTraits of(int stage) {
    ZT_CHECK(exists(stage), std::string("--zero-stage (zero_optimization.stage) must be ") +
                                kRangeText + ", got " + std::to_string(stage));
    StageTraits t;
    t.stage = stage;
    t.shard_optimizer = stage >= 1;
    t.shard_gradients = stage >= 2;
    t.shard_parameters = stage == 3;
    t.reduction = stage == 0   ? GradReduction::kAllReduceAfterLast
                  : stage == 1 ? GradReduction::kReduceScatterAfterLast
                               : GradReduction::kReduceScatterEachMicroBatch;
    t.gather_after_update = t.shard_optimizer && !t.shard_parameters;
    return t;
  }
};

}  // namespace zt

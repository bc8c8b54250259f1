// A memory plan: every buffer an engine holds while it trains, as {role, index, category, bytes,
// lifetime}. plan_engine_memory (engine/engine_memory_plan.h) writes it once from an EngineSpec;
// the engine and its parts allocate their buffers from it (allocate_planned), and the estimator
// (engine/estimator.h) sums it without allocating, so that the prediction and the allocation have
// one source (docs/ARCHITECTURE.md "The memory plan").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/memory.h"

namespace zt {

// When a planned buffer is held. A category's peak is what it holds for the run and from the
// first step on, plus the larger of its two phases (a micro-batch's pass, the optimizer step).
// Within one category no buffer of one phase lives into the other: the stage-3 groups kept after
// the last backward (params) live into the optimizer step, whose buffers are all comm buffers.
enum class BufferLifetime : int {
  kRun,            // from the engine's construction to its end
  kTraining,       // from the first training step to the end (losses, micro-batch tree)
  kPass,           // the most held at once during a micro-batch's forward and backward
  kOptimizerStep,  // during the optimizer step only
};

// What a planned buffer is. Per group, per reduce slot, per tree level or one of a kind (index).
enum class BufferRole : int {
  kWorkingParams,      // the working params of a group (stage 3: its shard)
  kGradients,          // a group's fp32 gradient accumulator (stage 2/3: its shard)
  kMaster,             // a group's fp32 master of the own range
  kAdamM,              // Adam's first moment of the own range
  kAdamV,              // Adam's second moment of the own range
  kDelayedWorking,     // a delayed update held back one step (own range, working dtype)
  kDelayedFresh,       // the delayed update being computed
  kComputeUpcast,      // fp32 upcast of the group being computed
  kTiedUpcast,         // tied embeddings: the embedding's fp32 upcast while the head computes
  kTiedGradients,      // tied embeddings: the embedding's gradient bucket
  kAdapterUpcast,      // LoRA: the fp32 upcast of a layer's adapter group
  kGroupSumsq,         // Σ grad² of every group, read once per step
  kNormBlocks,         // world-invariant: Σ grad² of every norm block
  kStepLosses,         // the per-token losses of a step's micro-batches
  kUpdateTile,         // param offload without optimizer offload: a group's updated shard
  kGatherStaging,      // stages 1/2: one chunk of every rank's updated params
  kReduceBucket,       // a reduce slot's model-written gradient bucket (per slot)
  kReducePacked,       // a reduce slot's packing copy when buckets split a group (per slot)
  kReduceReceive,      // a reduce slot's received shard (per slot)
  kReduceTreeScratch,  // world-invariant: a reduce slot's rank-tree partial sums (per slot)
  kMicroBatchTree,     // world-invariant: a level of the micro-batch tree (per level)
  kGatheredParams,     // stage 3: the gathered groups held at once
  kStagedShards,       // stage 3 param offload: device copies of the shards being gathered
  kActivationArena,    // the model's activation arena
  kTokens,             // the model's int32 inputs, targets, document starts and embedding
                       // gradient ids, and the loss gradient's scale
  kHostResiduals,      // CPU checkpointing: the checkpointed layers' inputs
  kGradCopyStaging,    // optimizer offload, bf16 copies: a shard rounded on the device (two)
  kHostGradients,      // optimizer offload: a group's gradient shard on the host (fp32 or bf16)
  kPendingGradients,   // delayed offload update: the shard the running update reads
  kKeptState,          // exact offload overlap: a group's master, m and v kept while speculating
  kSpeculatedValues,   // exact offload overlap: a group's speculated working values (own range)
  kHostStaging,        // optimizer offload: a working-dtype staging tile (two)
  kHostOptimizer,      // optimizer offload to cpu: a group's master, m and v
  kNvmeBuffers,        // optimizer offload to nvme: the swap buffers
  kNvmeFile,           // optimizer offload to nvme: this rank's swap file
};
const char* buffer_role_name(BufferRole role);
const char* buffer_lifetime_name(BufferLifetime lifetime);  // "run", "training", "pass", ...

struct PlannedBuffer {
  BufferRole role = BufferRole::kWorkingParams;
  int index = -1;  // the group, slot or level; -1 for one of a kind
  MemCategory category = MemCategory::kParams;
  int64_t bytes = 0;
  BufferLifetime lifetime = BufferLifetime::kRun;
};

class MemoryPlan {
 public:
  void add(BufferRole role, int index, MemCategory category, int64_t bytes,
           BufferLifetime lifetime = BufferLifetime::kRun);
  void append(const MemoryPlan& other);
  const std::vector<PlannedBuffer>& buffers() const { return buffers_; }
  // The buffer (role, index); null when none is planned.
  const PlannedBuffer* find(BufferRole role, int index = -1) const;
  int64_t bytes_of(BufferRole role) const;  // over every index
  // What a category holds once the engine is built (kRun), and at its peak.
  int64_t at_rest(MemCategory category) const;
  int64_t peak(MemCategory category) const;
  // "  working params[3]  params  4096 B  run", a line per buffer, for messages and tests.
  std::string describe() const;
  // The buffers of each role added up (over its groups, slots or levels; `buffers` counts those
  // that hold bytes), in plan order: what `zerotrain estimate --plan` lists.
  struct RoleTotal {
    BufferRole role = BufferRole::kWorkingParams;
    MemCategory category = MemCategory::kParams;
    BufferLifetime lifetime = BufferLifetime::kRun;
    int buffers = 0;
    int64_t bytes = 0;
  };
  std::vector<RoleTotal> by_role() const;

 private:
  std::vector<PlannedBuffer> buffers_;
};

// The planned buffer (role, index) as T elements of its category (from `from`, default the
// tracker's memory); an empty buffer when none is planned.
template <typename T>
TrackedBuffer<T> allocate_planned(MemoryTracker& memory, const MemoryPlan& plan, BufferRole role,
                                  int index = -1, DeviceMemory* from = nullptr) {
  const PlannedBuffer* b = plan.find(role, index);
  if (!b) return {};
  ZT_CHECK(b->bytes % static_cast<int64_t>(sizeof(T)) == 0,
           std::string("memory plan: ") + buffer_role_name(role) + " is not whole elements");
  return TrackedBuffer<T>(memory, b->category, static_cast<size_t>(b->bytes) / sizeof(T), from);
}

}  // namespace zt

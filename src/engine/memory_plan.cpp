#include "engine/memory_plan.h"

#include <algorithm>

namespace zt {

const char* buffer_role_name(BufferRole role) {
  switch (role) {
    case BufferRole::kWorkingParams:
      return "working params";
    case BufferRole::kGradients:
      return "gradients";
    case BufferRole::kMaster:
      return "fp32 master";
    case BufferRole::kAdamM:
      return "adam m";
    case BufferRole::kAdamV:
      return "adam v";
    case BufferRole::kDelayedWorking:
      return "delayed update";
    case BufferRole::kDelayedFresh:
      return "delayed update (next)";
    case BufferRole::kComputeUpcast:
      return "compute upcast";
    case BufferRole::kTiedUpcast:
      return "tied embedding upcast";
    case BufferRole::kTiedGradients:
      return "tied embedding gradients";
    case BufferRole::kAdapterUpcast:
      return "adapter upcast";
    case BufferRole::kGroupSumsq:
      return "group sums of squares";
    case BufferRole::kNormBlocks:
      return "norm blocks";
    case BufferRole::kStepLosses:
      return "step losses";
    case BufferRole::kUpdateTile:
      return "update tile";
    case BufferRole::kGatherStaging:
      return "param gather staging";
    case BufferRole::kReduceBucket:
      return "reduce bucket";
    case BufferRole::kReducePacked:
      return "reduce packing";
    case BufferRole::kReduceReceive:
      return "reduce receive";
    case BufferRole::kReduceTreeScratch:
      return "reduce tree scratch";
    case BufferRole::kMicroBatchTree:
      return "micro-batch tree";
    case BufferRole::kGatheredParams:
      return "gathered params";
    case BufferRole::kStagedShards:
      return "staged shards";
    case BufferRole::kActivationArena:
      return "activation arena";
    case BufferRole::kTokens:
      return "tokens";
    case BufferRole::kHostResiduals:
      return "host residuals";
    case BufferRole::kGradCopyStaging:
      return "gradient copy staging";
    case BufferRole::kHostGradients:
      return "host gradients";
    case BufferRole::kPendingGradients:
      return "pending gradients";
    case BufferRole::kKeptState:
      return "kept optimizer state";
    case BufferRole::kSpeculatedValues:
      return "speculated working values";
    case BufferRole::kHostStaging:
      return "host staging tile";
    case BufferRole::kHostOptimizer:
      return "host optimizer state";
    case BufferRole::kNvmeBuffers:
      return "nvme swap buffers";
    case BufferRole::kNvmeFile:
      return "nvme swap file";
  }
  return "?";
}

const char* buffer_lifetime_name(BufferLifetime lifetime) {
  switch (lifetime) {
    case BufferLifetime::kRun:
      return "run";
    case BufferLifetime::kTraining:
      return "training";
    case BufferLifetime::kPass:
      return "pass";
    case BufferLifetime::kOptimizerStep:
      return "optimizer step";
  }
  return "?";
}

void MemoryPlan::add(BufferRole role, int index, MemCategory category, int64_t bytes,
                     BufferLifetime lifetime) {
  ZT_CHECK(bytes >= 0, std::string("memory plan: negative bytes for ") + buffer_role_name(role));
  ZT_CHECK(!find(role, index), std::string("memory plan: ") + buffer_role_name(role) + "[" +
                                   std::to_string(index) + "] planned twice");
  buffers_.push_back({role, index, category, bytes, lifetime});
}

void MemoryPlan::append(const MemoryPlan& other) {
  for (const PlannedBuffer& b : other.buffers_)
    add(b.role, b.index, b.category, b.bytes, b.lifetime);
}

const PlannedBuffer* MemoryPlan::find(BufferRole role, int index) const {
  const auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const PlannedBuffer& b) {
    return b.role == role && b.index == index;
  });
  return it == buffers_.end() ? nullptr : &*it;
}

int64_t MemoryPlan::bytes_of(BufferRole role) const {
  int64_t sum = 0;
  for (const PlannedBuffer& b : buffers_)
    if (b.role == role) sum += b.bytes;
  return sum;
}

int64_t MemoryPlan::at_rest(MemCategory category) const {
  int64_t sum = 0;
  for (const PlannedBuffer& b : buffers_)
    if (b.category == category && b.lifetime == BufferLifetime::kRun) sum += b.bytes;
  return sum;
}

int64_t MemoryPlan::peak(MemCategory category) const {
  int64_t held = 0, pass = 0, optimizer_step = 0;
  for (const PlannedBuffer& b : buffers_) {
    if (b.category != category) continue;
    if (b.lifetime == BufferLifetime::kPass)
      pass += b.bytes;
    else if (b.lifetime == BufferLifetime::kOptimizerStep)
      optimizer_step += b.bytes;
    else
      held += b.bytes;
  }
  return held + std::max(pass, optimizer_step);
}

std::string MemoryPlan::describe() const {
  std::string out;
  for (const PlannedBuffer& b : buffers_) {
    out += "  " + std::string(buffer_role_name(b.role)) +
           (b.index >= 0 ? "[" + std::to_string(b.index) + "]" : "") + "  " +
           mem_category_name(b.category) + "  " + std::to_string(b.bytes) + " B  " +
           buffer_lifetime_name(b.lifetime) + "\n";
  }
  return out;
}

std::vector<MemoryPlan::RoleTotal> MemoryPlan::by_role() const {
  std::vector<RoleTotal> totals;
  for (const PlannedBuffer& b : buffers_) {
    // Keyed by role, category and lifetime (a role keeps one of each in any one plan).
    auto it = std::find_if(totals.begin(), totals.end(), [&](const RoleTotal& t) {
      return t.role == b.role && t.category == b.category && t.lifetime == b.lifetime;
    });
    if (it == totals.end()) it = totals.insert(totals.end(), {b.role, b.category, b.lifetime});
    it->buffers += b.bytes > 0 ? 1 : 0;  // a frozen group's empty master is no buffer
    it->bytes += b.bytes;
  }
  return totals;
}

}  // namespace zt

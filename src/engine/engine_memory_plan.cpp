#include "engine/engine_memory_plan.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/engine_types.h"
#include "engine/grad_reducer.h"
#include "engine/offload/offload_optimizer.h"
#include "engine/pairwise_sum.h"
#include "engine/stage3_residency.h"
#include "engine/stage_traits.h"
#include "model/layout.h"

namespace zt {

namespace {

// What the size rules read: the partitions, which groups train, and their extremes.
struct PlanShape {
  const EngineSpec& spec;
  int world;
  StageTraits traits;
  ParamLayout layout;
  std::vector<GroupPartition> parts;
  std::vector<bool> trains;
  int64_t work_bytes = 0;          // bytes of one working-dtype element
  int64_t max_padded = 0;          // over every group
  int64_t max_trained_padded = 0;  // over the groups that train (the reduce slots)

  PlanShape(const EngineSpec& s, int w)
      : spec(s),
        world(w),
        traits(StageTraits::of(s.zero.stage)),
        layout(s.model),
        work_bytes(static_cast<int64_t>(dtype_size(working_dtype(s.precision)))) {
    for (int g = 0; g < static_cast<int>(layout.groups().size()); ++g) {
      parts.push_back(GroupPartition::of(layout.groups()[static_cast<size_t>(g)].numel, world,
                                         s.zero.shard_alignment()));
      trains.push_back(s.trainable.group_trains(layout, g));
      max_padded = std::max(max_padded, parts.back().padded);
      if (trains.back()) max_trained_padded = std::max(max_trained_padded, parts.back().padded);
    }
  }
  int groups() const { return static_cast<int>(parts.size()); }
  const GroupPartition& part(int g) const { return parts[static_cast<size_t>(g)]; }
  bool group_trains(int g) const { return trains[static_cast<size_t>(g)]; }
  // The optimizer's own range of group g (stage 0: the whole group); none when it is frozen.
  int64_t own(int g) const {
    if (!group_trains(g)) return 0;
    return traits.shard_optimizer ? part(g).shard : part(g).numel;
  }
  bool invariant() const { return spec.zero.world_invariant; }
  bool upcasts() const { return upcasts_working_params(spec.precision, spec.activation_storage); }
};

// Working params, gradients, and the optimizer state on the device, group by group.
void plan_group_states(const PlanShape& s, MemoryPlan& plan) {
  const OffloadConfig& offload = s.spec.offload;
  // offload_param: the stage-3 working shards live in the host pool.
  const MemCategory work_category =
      offload.param_offloaded() ? MemCategory::kHostOffload : MemCategory::kParams;
  // World-invariant stages 1-3 read the gradient from the micro-batch tree's sum in place.
  const bool grads_in_tree = s.invariant() && s.traits.shard_optimizer;
  for (int g = 0; g < s.groups(); ++g) {
    const GroupPartition& p = s.part(g);
    plan.add(BufferRole::kWorkingParams, g, work_category,
             (s.traits.shard_parameters ? p.shard : p.padded) * s.work_bytes);
    if (!grads_in_tree && s.group_trains(g))
      plan.add(BufferRole::kGradients, g, MemCategory::kGrads,
               (s.traits.shard_gradients ? p.shard : p.padded) * 4);
    if (offload.optimizer_offloaded()) continue;  // OffloadOptimizer's store
    for (BufferRole role : {BufferRole::kMaster, BufferRole::kAdamM, BufferRole::kAdamV})
      plan.add(role, g, MemCategory::kOptimizer, 4 * s.own(g));
    // A delayed update without offload holds two more copies of the own range's working values.
    if (offload.delay > 0) {
      plan.add(BufferRole::kDelayedWorking, g, MemCategory::kOptimizer, s.own(g) * s.work_bytes);
      plan.add(BufferRole::kDelayedFresh, g, MemCategory::kOptimizer, s.own(g) * s.work_bytes);
    }
  }
  if (!offload.optimizer_offloaded()) return;
  std::vector<int64_t> own_sizes;
  for (int g = 0; g < s.groups(); ++g) own_sizes.push_back(s.own(g));
  plan.append(OffloadOptimizer::plan(offload, own_sizes, s.spec.precision));
}

// The fp32 upcasts of what computes (bf16 params read by fp32-activation ops; 16-bit activations
// read the params as stored): the group, the tied embedding with the head, a layer's adapters.
// Tied embeddings also collect the embedding's gradient in a bucket of its own.
void plan_compute_buffers(const PlanShape& s, MemoryPlan& plan) {
  const bool tied = s.layout.tied_embeddings();
  const int64_t embed_padded = s.part(s.layout.embed_group()).padded;
  if (s.upcasts())
    plan.add(BufferRole::kComputeUpcast, -1, MemCategory::kCommBuffers, s.max_padded * 4);
  if (tied && s.upcasts())
    plan.add(BufferRole::kTiedUpcast, -1, MemCategory::kCommBuffers, embed_padded * 4);
  if (tied && s.group_trains(s.layout.embed_group()))
    plan.add(BufferRole::kTiedGradients, -1, MemCategory::kCommBuffers, embed_padded * 4);
  int64_t max_adapter_padded = 0;
  for (int l = 0; l < s.spec.model.num_layers; ++l)
    if (s.layout.adapter_group(l) >= 0)
      max_adapter_padded = std::max(max_adapter_padded, s.part(s.layout.adapter_group(l)).padded);
  if (max_adapter_padded > 0 && s.upcasts())
    plan.add(BufferRole::kAdapterUpcast, -1, MemCategory::kCommBuffers, max_adapter_padded * 4);
}

// Gradient reduction and the step's statistics: the reduce slots, every group's Σ grad², the
// world-invariant norm blocks and micro-batch tree, the step's per-token losses.
void plan_reduction(const PlanShape& s, MemoryPlan& plan) {
  const ZeroConfig& zero = s.spec.zero;
  plan.append(GradReducer::plan(
      s.max_trained_padded, zero.reduce_bucket_size, s.world, zero.overlap_comm ? 2 : 1,
      /*own_buckets=*/s.traits.reduces_each_micro_batch() || s.invariant(),
      /*reduce_scatter=*/s.traits.shard_optimizer || s.invariant(),
      s.invariant() ? SumOrder::kRankTree : SumOrder::kLibrary));
  plan.add(BufferRole::kGroupSumsq, -1, MemCategory::kCommBuffers, s.groups() * 8);
  if (s.invariant()) {
    int64_t leaf = 0, blocks = 0;  // frozen groups have no leaf range and no norm blocks
    for (int g = 0; g < s.groups(); ++g) {
      if (!s.group_trains(g)) continue;
      leaf += s.part(g).shard;
      blocks += s.part(g).padded / ZeroConfig::kInvariantNormBlock;
    }
    plan.add(BufferRole::kNormBlocks, -1, MemCategory::kCommBuffers, blocks * 8);
    for (int level = 0; level < PairwiseSum::levels_for(s.spec.grad_accum); ++level)
      plan.add(BufferRole::kMicroBatchTree, level, MemCategory::kGrads, leaf * 4,
               BufferLifetime::kTraining);
  }
  const int64_t tokens = s.spec.micro_batch * s.spec.seq_len;
  plan.add(BufferRole::kStepLosses, -1, MemCategory::kCommBuffers, s.spec.grad_accum * tokens * 4,
           BufferLifetime::kTraining);
}

// Replays the stage-3 residency policy the gatherer executes over one micro-batch's pass
// (forward 0..G-1, backward G-1..0), twice: the peak is taken over a first pass and a pass that
// starts with the persistent groups kept (gradient accumulation keeps them across micro-batches).
// The groups of one compute unit (the head and the tied embedding, a layer and its LoRA adapters)
// are acquired together and released together, as the engine does. Returns {peak gathered
// elements, peak elements of gathers in flight}.
std::pair<int64_t, int64_t> replay_stage3_residency(const PlanShape& s) {
  Stage3Residency residency(s.parts, s.spec.zero);
  const std::vector<std::vector<int>> units =
      Stage3Residency::unit_pass(s.layout, s.spec.trainable.lowest_backward_group(s.layout));
  for (int pass = 0; pass < 2; ++pass) {
    residency.begin_pass(Stage3Residency::flatten(units));
    const std::vector<int>& uses = residency.uses();
    size_t i = 0;
    for (const auto& unit : units) {
      for (size_t k = i; k < i + unit.size(); ++k) {
        residency.gathers_for(k);
        residency.landed(uses[k]);
      }
      for (size_t k = i; k < i + unit.size(); ++k)
        if (!residency.keep_after(k)) residency.released(uses[k]);
      i += unit.size();
    }
  }
  return {residency.peak_live_elements(), residency.peak_in_flight_elements()};
}

// What lives only during a pass or the optimizer step: the stage-3 gathers (and the device copies
// of host shards being gathered), the device tile of a param-offloaded update, the stage 1/2
// all-gather staging when a group's shard exceeds allgather_bucket_size per rank.
void plan_transients(const PlanShape& s, MemoryPlan& plan) {
  const OffloadConfig& offload = s.spec.offload;
  if (s.traits.shard_parameters) {
    const auto [gathered, in_flight] = replay_stage3_residency(s);
    plan.add(BufferRole::kGatheredParams, -1, MemCategory::kParams, gathered * s.work_bytes,
             BufferLifetime::kPass);
    if (offload.param_offloaded())
      plan.add(BufferRole::kStagedShards, -1, MemCategory::kCommBuffers,
               in_flight / s.world * s.work_bytes, BufferLifetime::kPass);
    if (offload.param_offloaded() && !offload.optimizer_offloaded())
      plan.add(BufferRole::kUpdateTile, -1, MemCategory::kCommBuffers,
               s.max_trained_padded / s.world * s.work_bytes, BufferLifetime::kOptimizerStep);
    return;
  }
  if (!s.traits.gather_after_update) return;
  const int64_t per_rank = std::max<int64_t>(1, s.spec.zero.allgather_bucket_size / s.world);
  bool chunks = false;
  for (int g = 0; g < s.groups(); ++g) chunks |= s.group_trains(g) && s.part(g).shard > per_rank;
  if (chunks)
    plan.add(BufferRole::kGatherStaging, -1, MemCategory::kCommBuffers,
             per_rank * s.world * s.work_bytes, BufferLifetime::kOptimizerStep);
}

// The model's activation arena, its tokens and CPU-checkpointed inputs (model/llama.h).
void plan_activations(const PlanShape& s, MemoryPlan& plan) {
  const ActivationPlan a = ActivationPlan::make(s.spec.model, s.spec.micro_batch, s.spec.seq_len,
                                                s.spec.ac, 0, s.spec.activation_storage);
  plan.add(BufferRole::kActivationArena, -1, MemCategory::kActivations, a.device_bytes());
  plan.add(BufferRole::kTokens, -1, MemCategory::kActivations, a.token_bytes);
  if (a.host_residual > 0)
    plan.add(BufferRole::kHostResiduals, -1, MemCategory::kHostOffload, a.host_residual);
}

}  // namespace

MemoryPlan plan_engine_memory(const EngineSpec& spec, int world) {
  const PlanShape shape(spec, world);
  MemoryPlan plan;
  plan_group_states(shape, plan);
  plan_compute_buffers(shape, plan);
  plan_reduction(shape, plan);
  plan_transients(shape, plan);
  plan_activations(shape, plan);
  return plan;
}

}  // namespace zt

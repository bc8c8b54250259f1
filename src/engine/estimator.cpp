#include "engine/estimator.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

#include "engine/offload/nvme_swapper.h"
#include "engine/pairwise_sum.h"
#include "engine/stage3_residency.h"
#include "engine/stage_traits.h"
#include "model/layout.h"
#include "util/error.h"

namespace zt {

namespace {

std::vector<GroupPartition> partition_groups(const ModelConfig& model, int world,
                                             int64_t shard_align) {
  const ParamLayout layout(model);
  std::vector<GroupPartition> groups;
  for (const GroupInfo& g : layout.groups())
    groups.push_back(GroupPartition::of(g.numel, world, shard_align));
  return groups;
}

// Replays the stage-3 residency policy the engine's gatherer executes over one micro-batch's
// pass (forward 0..G-1, backward G-1..0), twice: the peak is taken over a first pass and a pass
// that starts with the persistent groups kept (gradient accumulation keeps them across
// micro-batches). The groups of one compute unit (the head and the tied embedding, a layer and
// its LoRA adapters) are acquired together and released together, as the engine does. Returns
// {peak gathered elements, peak elements of gathers in flight}.
std::pair<int64_t, int64_t> replay_stage3_residency(const std::vector<GroupPartition>& groups,
                                                    const ZeroConfig& zero,
                                                    const ParamLayout& layout,
                                                    int lowest_backward) {
  Stage3Residency residency(groups, zero);
  const std::vector<std::vector<int>> units = Stage3Residency::unit_pass(layout, lowest_backward);
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

}  // namespace

namespace {

// Sums over every group (working params, buffers) and over the groups that train (gradients,
// optimizer state; model/trainable.h: a frozen group has neither).
struct GroupSums {
  int64_t shard = 0, padded = 0, max_padded = 0, max_trained_padded = 0;
  int64_t trained_shard = 0, trained_padded = 0, trained_own = 0, max_trained_own = 0;
  std::vector<int64_t> own_sizes;  // rank 0's own range of optimizer state per group
};

GroupSums sum_groups(const std::vector<GroupPartition>& groups, const StageTraits& traits,
                     const TrainableSet& trainable, const ParamLayout& layout) {
  GroupSums s;
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupPartition& g = groups[i];
    s.shard += g.shard;
    s.padded += g.padded;
    s.max_padded = std::max(s.max_padded, g.padded);
    const bool trains = trainable.group_trains(layout, static_cast<int>(i));
    const int64_t own = trains ? (traits.shard_optimizer ? g.shard : g.numel) : 0;
    s.own_sizes.push_back(own);
    s.trained_own += own;
    s.max_trained_own =
        std::max(s.max_trained_own, traits.shard_optimizer || !trains ? own : g.padded);
    if (!trains) continue;
    s.max_trained_padded = std::max(s.max_trained_padded, g.padded);
    s.trained_shard += g.shard;
    s.trained_padded += g.padded;
  }
  return s;
}

// Working params: stages 0-2 the full padded groups; stage 3 shards + gathered groups. The peak
// is taken over a first pass and a pass that starts with the persistent groups kept (gradient
// accumulation keeps them across micro-batches). offload_param moves the shards to the host pool;
// each gather in flight then holds a device copy of its shard: returns those staged bytes.
int64_t add_working_params(const EngineSpec& spec, int world,
                           const std::vector<GroupPartition>& groups, const GroupSums& sums,
                           const ParamLayout& layout, MemoryEstimate& e) {
  const int64_t work_bytes = static_cast<int64_t>(dtype_size(working_dtype(spec.precision)));
  if (!StageTraits::of(spec.zero.stage).shard_parameters) {
    e.params = sums.padded * work_bytes;
    return 0;
  }
  const auto [gathered, in_flight] = replay_stage3_residency(
      groups, spec.zero, layout, spec.trainable.lowest_backward_group(layout));
  e.stage3_gathered = gathered * work_bytes;
  e.params = e.stage3_gathered;
  if (!spec.offload.param_offloaded()) {
    e.params += sums.shard * work_bytes;
    return 0;
  }
  e.host += sums.shard * work_bytes;
  return in_flight / world * work_bytes;
}

// Gradients and optimizer state, on the device or offloaded (host pool, NVMe file).
void add_gradients_and_optimizer(const EngineSpec& spec, const GroupSums& sums, MemoryEstimate& e) {
  const ZeroConfig& zero = spec.zero;
  const OffloadConfig& offload = spec.offload;
  const StageTraits traits = StageTraits::of(zero.stage);
  const int64_t work_bytes = static_cast<int64_t>(dtype_size(working_dtype(spec.precision)));
  // World-invariant training: the tree over the rank's micro-batches keeps log2(A) + 1 buffers
  // of every group's shard (engine/pairwise_sum.h); at stages 1-3 its sum is the optimizer's
  // gradient, so there is no other gradient buffer.
  if (!(zero.world_invariant && traits.shard_optimizer))
    e.grads = (traits.shard_gradients ? sums.trained_shard : sums.trained_padded) * 4;
  if (zero.world_invariant)
    e.grads += PairwiseSum::levels_for(spec.grad_accum) * sums.trained_shard * 4;
  const int64_t own = sums.trained_own;
  if (!offload.optimizer_offloaded()) {
    // A delayed update without offload holds two more copies of the own range's working values.
    e.optimizer = 12 * own + (offload.delay > 0 ? 2 * own * work_bytes : 0);
    return;
  }
  // OffloadOptimizer: fp32 gradient shards + two working-dtype staging tiles, then the store.
  const int64_t tile = std::min(offload.sub_group_size, std::max<int64_t>(1, sums.max_trained_own));
  // A delayed update reads a second set of gradient shards while the next step's land.
  e.host += 4 * own * (offload.delay > 0 ? 2 : 1) + 2 * tile * work_bytes;
  if (offload.optimizer == OffloadDevice::kCpu) {
    // The exact overlap keeps master, m and v of what it speculates on: the state again, or at
    // most overlap_bytes of it.
    int64_t kept = offload.keeps_speculated_state() ? 12 * own : 0;
    if (offload.overlap_bytes >= 0) kept = std::min(kept, offload.overlap_bytes);
    e.host += 12 * own + kept;
  } else {
    e.host += offload.buffer_count * std::max<int64_t>(4096, nvme_record_bytes(tile));
    e.nvme = nvme_file_bytes(sums.own_sizes, tile);
  }
}

// Buffers: the fp32 upcast of the group being computed (bf16 params read by fp32-activation ops;
// bf16 activations read the bf16 params as stored), then per reduce slot a model-written bucket
// (stages 2/3), a packing copy when buckets split a group and a receive shard (reduce-scatter,
// stages 1-3), and the staged shards of param offload (`staged_shards`). World-invariant training
// reduce-scatters each micro-batch at every stage, and keeps one double per norm block of every
// padded group.
int64_t buffer_bytes(const EngineSpec& spec, int world, const std::vector<GroupPartition>& groups,
                     const GroupSums& sums, const ParamLayout& layout, int64_t staged_shards) {
  const ZeroConfig& zero = spec.zero;
  const StageTraits traits = StageTraits::of(zero.stage);
  const int64_t work_bytes = static_cast<int64_t>(dtype_size(working_dtype(spec.precision)));
  const int64_t slots = zero.overlap_comm ? 2 : 1;
  const bool reduce_scatter =
      traits.reduction != GradReduction::kAllReduceAfterLast || zero.world_invariant;
  // The reduce slots are sized by the largest group that has gradients (one that trains).
  const int64_t max_trained_shard = sums.max_trained_padded / world;
  const bool packs = reduce_scatter && zero.reduce_bucket_size / world < max_trained_shard;
  int64_t per_slot = 0;
  if (traits.reduces_each_micro_batch() || zero.world_invariant)
    per_slot += sums.max_trained_padded;
  if (packs) per_slot += sums.max_trained_padded;
  if (reduce_scatter) per_slot += max_trained_shard;
  // offload_param without optimizer offload: the device AdamW writes a group's updated shard
  // into a device tile before it goes to the host (optimizer step, when no gather is staged).
  const int64_t update_tile = spec.offload.param_offloaded() && !spec.offload.optimizer_offloaded()
                                  ? max_trained_shard * work_bytes
                                  : 0;
  // The per-token losses of every micro-batch stay on the device until the step's end, and so
  // do the groups' gradient sums of squares (one double each) until the norm is read.
  const int64_t step_losses = spec.grad_accum * spec.micro_batch * spec.seq_len;
  const auto group_sums =
      static_cast<int64_t>(groups.size()) * 8 +
      (zero.world_invariant ? sums.trained_padded / ZeroConfig::kInvariantNormBlock * 8 : 0);
  // Tied embeddings: the embedding is computed with the head, so its fp32 upcast is a second
  // one, and its gradient collects the head's share in a bucket of its own until the
  // embedding's backward.
  const bool upcasts = upcasts_working_params(spec.precision, spec.activation_storage);
  const int64_t embed_padded = groups.front().padded;
  const int64_t tied_buffers = spec.model.tie_word_embeddings
                                   ? (upcasts ? embed_padded : 0) +
                                         (spec.trainable.group_trains(layout, 0) ? embed_padded : 0)
                                   : 0;
  return ((upcasts ? sums.max_padded : 0) + tied_buffers + slots * per_slot + step_losses) * 4 +
         group_sums + std::max(staged_shards, update_tile);
}

}  // namespace

MemoryEstimate estimate_memory(const EngineSpec& spec, int world) {
  const ParamLayout layout(spec.model);
  const std::vector<GroupPartition> groups =
      partition_groups(spec.model, world, spec.zero.shard_alignment());
  const GroupSums sums =
      sum_groups(groups, StageTraits::of(spec.zero.stage), spec.trainable, layout);
  MemoryEstimate e;
  const int64_t staged_shards = add_working_params(spec, world, groups, sums, layout, e);
  add_gradients_and_optimizer(spec, sums, e);
  const ActivationPlan plan = ActivationPlan::make(spec.model, spec.micro_batch, spec.seq_len,
                                                   spec.ac, 0, spec.activation_storage);
  // The activation arena and the model's int32 tokens: inputs, targets, document starts (llama.h).
  e.activations = plan.device_bytes() + 3 * spec.micro_batch * spec.seq_len * 4;
  e.host += plan.host_residual;
  e.buffers = buffer_bytes(spec, world, groups, sums, layout, staged_shards);
  // Parameters are initialised and loaded through host memory (never a device-pool scratch).
  return e;
}

double theory_model_states_bytes(int64_t psi, int world, int stage, Precision precision,
                                 int64_t psi_frozen) {
  const StageTraits traits = StageTraits::of(stage);
  const double k = static_cast<double>(dtype_size(working_dtype(precision)));
  const double p = static_cast<double>(psi), n = static_cast<double>(world);
  const double trained = p - static_cast<double>(psi_frozen);
  auto per_rank = [&](double elements, bool sharded) { return sharded ? elements / n : elements; };
  return k * per_rank(p, traits.shard_parameters) +
         4.0 * per_rank(trained, traits.shard_gradients) +
         12.0 * per_rank(trained, traits.shard_optimizer);
}

OffloadFigure deepspeed_offload_figure(const ModelConfig& model, int world, int stage,
                                       int ranks_per_node, bool params_on_cpu) {
  const ParamLayout layout(model);
  const double psi = static_cast<double>(layout.total_numel());
  int64_t largest = 0;
  for (const GroupInfo& g : layout.groups()) largest = std::max(largest, g.numel);
  const double largest_bytes = 4.0 * static_cast<double>(largest);
  OffloadFigure f;
  const bool sharded_params = StageTraits::of(stage).shard_parameters;
  if (sharded_params && params_on_cpu) {
    f.device_bytes = largest_bytes;
    f.host_bytes_per_node = psi * std::max(4.0 * ranks_per_node, 18.0) * 1.5;
    return f;
  }
  f.device_bytes = sharded_params ? largest_bytes + 2.0 * psi / world : 2.0 * psi;
  f.host_bytes_per_node = psi * std::max(4.0 * ranks_per_node, 16.0) * 1.5;
  return f;
}

FitRecommendation recommend_configuration(const EngineSpec& spec, int world, int64_t device_bytes) {
  const ActivationCheckpointing& requested = spec.ac;
  ActivationCheckpointing full, selective;
  full.every = 1;
  full.on_host = requested.on_host;
  selective.selective = true;
  // With a checkpointing policy already requested, every row uses it: the plain rows as they
  // are, and the rows that would add a policy drop out unless they also offload.
  enum class Policy { kPlain, kSelective, kFull };
  OffloadConfig none, cpu_optimizer, cpu_all;
  cpu_optimizer.optimizer = cpu_all.optimizer = cpu_all.param = OffloadDevice::kCpu;
  struct Step {
    const char* label;
    int stage;
    Policy policy;
    const OffloadConfig* offload;
  };
  const Step steps[] = {
      {"stage 0", 0, Policy::kPlain, &none},
      {"stage 1", 1, Policy::kPlain, &none},
      {"stage 2", 2, Policy::kPlain, &none},
      {"stage 2 + selective checkpointing", 2, Policy::kSelective, &none},
      {"stage 2 + checkpointing", 2, Policy::kFull, &none},
      {"stage 3", 3, Policy::kPlain, &none},
      {"stage 3 + selective checkpointing", 3, Policy::kSelective, &none},
      {"stage 3 + checkpointing", 3, Policy::kFull, &none},
      {"stage 3 + checkpointing + CPU optimizer offload", 3, Policy::kFull, &cpu_optimizer},
      {"stage 3 + checkpointing + CPU optimizer and param offload", 3, Policy::kFull, &cpu_all},
  };
  FitRecommendation rec;
  for (const Step& s : steps) {
    if (s.policy != Policy::kPlain && requested.any() && s.offload == &none) continue;
    FitCandidate c;
    c.label = s.label;
    c.stage = s.stage;
    c.ac = requested.any() || s.policy == Policy::kPlain ? requested
           : s.policy == Policy::kSelective              ? selective
                                                         : full;
    c.offload = *s.offload;
    EngineSpec candidate = spec;
    candidate.zero.stage = s.stage;
    candidate.ac = c.ac;
    candidate.offload = c.offload;
    c.estimate = estimate_memory(candidate, world);
    c.fits = c.estimate.device_total() <= device_bytes;
    if (c.fits && rec.chosen < 0) rec.chosen = static_cast<int>(rec.candidates.size());
    rec.candidates.push_back(c);
  }
  return rec;
}

std::string device_breakdown(const MemoryEstimate& e) {
  const std::pair<const char*, int64_t> parts[] = {{"params", e.params},
                                                   {"grads", e.grads},
                                                   {"optimizer", e.optimizer},
                                                   {"activations", e.activations},
                                                   {"buffers", e.buffers}};
  size_t largest = 0;
  for (size_t k = 1; k < std::size(parts); ++k)
    if (parts[k].second > parts[largest].second) largest = k;
  std::string out;
  for (size_t k = 0; k < std::size(parts); ++k) {
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.3f", static_cast<double>(parts[k].second) / (1 << 30));
    out += std::string(k ? ", " : "") + parts[k].first + " " + gib + " GiB" +
           (k == largest ? " (largest)" : "");
  }
  return out;
}

MaxMicroBatch max_micro_batch(const EngineSpec& spec, int world, int64_t device_bytes,
                              const std::function<int64_t(int64_t)>& outside_bytes) {
  const auto at = [&](int64_t b) {
    EngineSpec sized = spec;
    sized.micro_batch = b;
    return estimate_memory(sized, world);
  };
  const auto fits = [&](int64_t b) {
    const int64_t outside = outside_bytes ? outside_bytes(b) : 0;
    return outside <= device_bytes && at(b).device_total() <= device_bytes - outside;
  };
  constexpr int64_t kLargest = int64_t{1} << 24;  // sequences: far past any device
  int64_t good = 0, bad = 1;                      // fits(good) (0 trivially), !fits(bad)
  while (bad <= kLargest && fits(bad)) {
    good = bad;
    bad *= 2;
  }
  if (bad > kLargest) bad = kLargest + 1;
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return {good, at(std::max<int64_t>(good, 1)), at(good + 1)};
}

}  // namespace zt

#include "engine/estimator.h"

#include <algorithm>
#include <set>

#include "engine/offload/nvme_swapper.h"
#include "model/layout.h"
#include "util/error.h"

namespace zt {

namespace {

// A group as ZeroEngine partitions it: padded to a multiple of N, N equal shards.
struct GroupSize {
  int64_t numel = 0, shard = 0, padded = 0;
};

std::vector<GroupSize> partition_groups(const ModelConfig& model, int world) {
  const ParamLayout layout(model);
  std::vector<GroupSize> groups;
  for (const GroupInfo& g : layout.groups()) {
    GroupSize s;
    s.numel = g.numel;
    s.shard = (g.numel + world - 1) / world;
    s.padded = s.shard * world;
    groups.push_back(s);
  }
  return groups;
}

// Replays ParamGatherer's residency rules over one micro-batch's schedule (forward 0..G-1,
// backward G-1..0) and returns the most gathered elements alive at once. `live` holds the
// groups already gathered when the pass starts (the persistent ones from an earlier pass).
class GatherSimulation {
 public:
  GatherSimulation(const std::vector<GroupSize>& groups, const ZeroConfig& zero)
      : groups_(groups), zero_(zero), live_(groups.size(), false), inflight_(groups.size(), false) {
    const int G = static_cast<int>(groups.size());
    for (int g = 0; g < G; ++g) uses_.push_back(g);
    for (int g = G - 1; g >= 0; --g) uses_.push_back(g);
  }

  // Runs one pass; returns the peak of live elements during it.
  int64_t run_pass() {
    for (size_t i = 0; i < uses_.size(); ++i) {
      acquire(i);
      release_after(i);
    }
    return peak_;
  }
  // Peak of the padded elements of gathers in flight (issued, not yet waited for).
  int64_t peak_inflight() const { return peak_inflight_; }

 private:
  int64_t padded(int g) const { return groups_[static_cast<size_t>(g)].padded; }
  void gather(int g) {
    live_[static_cast<size_t>(g)] = inflight_[static_cast<size_t>(g)] = true;
    live_elements_ += padded(g);
    inflight_elements_ += padded(g);
    peak_ = std::max(peak_, live_elements_);
    peak_inflight_ = std::max(peak_inflight_, inflight_elements_);
  }
  void landed(int g) {
    if (!inflight_[static_cast<size_t>(g)]) return;
    inflight_[static_cast<size_t>(g)] = false;
    inflight_elements_ -= padded(g);
  }
  void acquire(size_t i) {
    const int g = uses_[i];
    if (!live_[static_cast<size_t>(g)]) gather(g);
    if (zero_.overlap_comm) {
      for (size_t j = i + 1; j < uses_.size(); ++j) {
        const int h = uses_[j];
        if (live_[static_cast<size_t>(h)]) continue;
        if (inflight_elements_ + padded(h) > zero_.prefetch_bucket_size) break;
        if (live_elements_ + padded(h) > zero_.max_live_parameters) break;
        gather(h);
      }
    }
    landed(g);
  }
  void release_after(size_t i) {
    const int g = uses_[i];
    if (groups_[static_cast<size_t>(g)].numel < zero_.param_persistence_threshold) return;
    for (size_t k = i + 1; k < uses_.size(); ++k) {
      if (uses_[k] != g) continue;
      const std::set<int> between(uses_.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                  uses_.begin() + static_cast<std::ptrdiff_t>(k));
      int64_t distance = 0;
      for (int b : between) distance += groups_[static_cast<size_t>(b)].numel;
      if (distance < zero_.max_reuse_distance && live_elements_ <= zero_.max_live_parameters)
        return;
      break;
    }
    landed(g);
    live_[static_cast<size_t>(g)] = false;
    live_elements_ -= padded(g);
  }

  const std::vector<GroupSize>& groups_;
  ZeroConfig zero_;
  std::vector<int> uses_;
  std::vector<bool> live_, inflight_;
  int64_t live_elements_ = 0, inflight_elements_ = 0, peak_ = 0, peak_inflight_ = 0;
};

}  // namespace

MemoryEstimate estimate_memory(const ModelConfig& model, int world, const ZeroConfig& zero,
                               Precision precision, int64_t micro_batch, int64_t seq_len,
                               const ActivationCheckpointing& ac, const OffloadConfig& offload,
                               int64_t grad_accum) {
  ZT_CHECK(world >= 1, "estimate: world size must be >= 1, got " + std::to_string(world));
  ZT_CHECK(micro_batch > 0 && seq_len > 0 && grad_accum > 0,
           "estimate: micro-batch, seq-len and grad-accum must be positive");
  zero.validate();
  offload.validate(zero.stage);
  const std::vector<GroupSize> groups = partition_groups(model, world);
  const bool bf16 = precision == Precision::kBf16;
  const int64_t work_bytes = bf16 ? 2 : 4;
  const int stage = zero.stage;
  int64_t sum_numel = 0, sum_shard = 0, sum_padded = 0, max_padded = 0;
  std::vector<int64_t> own_sizes;  // rank 0's own range per group
  for (const GroupSize& g : groups) {
    sum_numel += g.numel;
    sum_shard += g.shard;
    sum_padded += g.padded;
    max_padded = std::max(max_padded, g.padded);
    own_sizes.push_back(stage == 0 ? g.numel : g.shard);
  }
  const int64_t max_shard = max_padded / world;
  const int64_t sum_own = stage == 0 ? sum_numel : sum_shard;
  const int64_t max_own = stage == 0 ? max_padded : max_shard;

  MemoryEstimate e;
  // Working params: stages 0-2 the full padded groups; stage 3 shards + gathered groups. The
  // peak is taken over a first pass and a pass that starts with the persistent groups kept
  // (gradient accumulation keeps them across micro-batches). offload_param moves the shards to
  // the host pool; each gather in flight then holds a device copy of its shard (buffers).
  int64_t staged_shards = 0;
  if (stage == 3) {
    GatherSimulation sim(groups, zero);
    sim.run_pass();
    const int64_t gathered = sim.run_pass();
    e.stage3_gathered = gathered * work_bytes;
    e.params = e.stage3_gathered;
    if (offload.param_offloaded()) {
      e.host += sum_shard * work_bytes;
      staged_shards = sim.peak_inflight() / world * work_bytes;
    } else {
      e.params += sum_shard * work_bytes;
    }
  } else {
    e.params = sum_padded * work_bytes;
  }
  e.grads = (stage <= 1 ? sum_padded : sum_shard) * 4;
  if (offload.optimizer_offloaded()) {
    // OffloadOptimizer: fp32 gradient shards + two working-dtype staging tiles, then the store.
    const int64_t tile = std::min(offload.sub_group_size, std::max<int64_t>(1, max_own));
    e.host += 4 * sum_own + 2 * tile * work_bytes;
    if (offload.optimizer == OffloadDevice::kCpu) {
      e.host += 12 * sum_own;
    } else {
      e.host += offload.buffer_count * std::max<int64_t>(4096, nvme_record_bytes(tile));
      e.nvme = nvme_file_bytes(own_sizes, tile);
    }
  } else {
    e.optimizer = 12 * sum_own;
  }

  const ActivationPlan plan = ActivationPlan::make(model, micro_batch, seq_len, ac);
  e.activations = plan.device_elements() * 4 + 2 * micro_batch * seq_len * 4;
  e.host += plan.host_residual * 4;

  // Buffers: the fp32 upcast of the group being computed (bf16 only), then per reduce slot a
  // model-written bucket (stages 2/3), a packing copy when buckets split a group and a receive
  // shard (reduce-scatter, stages 1-3), and the staged shards of param offload.
  const int64_t slots = zero.overlap_comm ? 2 : 1;
  const bool reduce_scatter = stage >= 1;
  const bool packs = reduce_scatter && zero.reduce_bucket_size / world < max_shard;
  int64_t per_slot = 0;
  if (stage >= 2) per_slot += max_padded;
  if (packs) per_slot += max_padded;
  if (reduce_scatter) per_slot += max_shard;
  // offload_param without optimizer offload: the device AdamW writes a group's updated shard
  // into a device tile before it goes to the host (optimizer step, when no gather is staged).
  const int64_t update_tile =
      offload.param_offloaded() && !offload.optimizer_offloaded() ? max_shard * work_bytes : 0;
  // The per-token losses of every micro-batch stay on the device until the step's end, and so
  // do the groups' gradient sums of squares (one double each) until the norm is read.
  const int64_t step_losses = grad_accum * micro_batch * seq_len;
  const auto group_sums = static_cast<int64_t>(groups.size()) * 8;
  e.buffers = ((bf16 ? max_padded : 0) + slots * per_slot + step_losses) * 4 + group_sums +
              std::max(staged_shards, update_tile);
  // Parameters are initialised and loaded through host memory (never a device-pool scratch).
  return e;
}

double theory_model_states_bytes(int64_t psi, int world, int stage, Precision precision) {
  const double k = precision == Precision::kBf16 ? 2.0 : 4.0;
  const double p = static_cast<double>(psi), n = static_cast<double>(world);
  switch (stage) {
    case 0:
      return (k + 16.0) * p;
    case 1:
      return (k + 4.0) * p + 12.0 * p / n;
    case 2:
      return k * p + 16.0 * p / n;
    case 3:
      return (k + 16.0) * p / n;
    default:
      fail("theory_model_states_bytes: stage must be 0-3, got " + std::to_string(stage));
  }
}

OffloadFigure deepspeed_offload_figure(const ModelConfig& model, int world, int stage,
                                       int ranks_per_node, bool params_on_cpu) {
  const ParamLayout layout(model);
  const double psi = static_cast<double>(layout.total_numel());
  int64_t largest = 0;
  for (const GroupInfo& g : layout.groups()) largest = std::max(largest, g.numel);
  const double largest_bytes = 4.0 * static_cast<double>(largest);
  OffloadFigure f;
  if (stage == 3 && params_on_cpu) {
    f.device_bytes = largest_bytes;
    f.host_bytes_per_node = psi * std::max(4.0 * ranks_per_node, 18.0) * 1.5;
    return f;
  }
  f.device_bytes = stage == 3 ? largest_bytes + 2.0 * psi / world : 2.0 * psi;
  f.host_bytes_per_node = psi * std::max(4.0 * ranks_per_node, 16.0) * 1.5;
  return f;
}

FitRecommendation recommend_configuration(const ModelConfig& model, int world,
                                          const ZeroConfig& zero, Precision precision,
                                          int64_t micro_batch, int64_t seq_len, int64_t grad_accum,
                                          const ActivationCheckpointing& requested,
                                          int64_t device_bytes) {
  ActivationCheckpointing full;
  full.every = 1;
  full.on_host = requested.on_host;
  // With a checkpointing policy already requested, the plain rows use it too.
  const ActivationCheckpointing& plain = requested;
  const ActivationCheckpointing& ckpt = requested.every > 0 ? requested : full;
  OffloadConfig none, cpu_optimizer, cpu_all;
  cpu_optimizer.optimizer = cpu_all.optimizer = cpu_all.param = OffloadDevice::kCpu;
  struct Step {
    const char* label;
    int stage;
    const ActivationCheckpointing* ac;
    const OffloadConfig* offload;
  };
  const Step steps[] = {
      {"stage 0", 0, &plain, &none},
      {"stage 1", 1, &plain, &none},
      {"stage 2", 2, &plain, &none},
      {"stage 2 + checkpointing", 2, &ckpt, &none},
      {"stage 3", 3, &plain, &none},
      {"stage 3 + checkpointing", 3, &ckpt, &none},
      {"stage 3 + checkpointing + CPU optimizer offload", 3, &ckpt, &cpu_optimizer},
      {"stage 3 + checkpointing + CPU optimizer and param offload", 3, &ckpt, &cpu_all},
  };
  FitRecommendation rec;
  for (const Step& s : steps) {
    // The "+ checkpointing" rows repeat the plain row when checkpointing was requested anyway.
    if (s.ac == &ckpt && plain.every > 0 && s.offload == &none) continue;
    FitCandidate c;
    c.label = s.label;
    c.stage = s.stage;
    c.ac = *s.ac;
    c.offload = *s.offload;
    ZeroConfig z = zero;
    z.stage = s.stage;
    c.estimate = estimate_memory(model, world, z, precision, micro_batch, seq_len, c.ac, c.offload,
                                 grad_accum);
    c.fits = c.estimate.device_total() <= device_bytes;
    if (c.fits && rec.chosen < 0) rec.chosen = static_cast<int>(rec.candidates.size());
    rec.candidates.push_back(c);
  }
  return rec;
}

}  // namespace zt

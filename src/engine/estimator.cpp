#include "engine/estimator.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

#include "engine/engine_memory_plan.h"
#include "engine/stage_traits.h"
#include "model/layout.h"
#include "util/error.h"

namespace zt {

MemoryEstimate estimate_memory(const EngineSpec& spec, int world) {
  const MemoryPlan plan = plan_engine_memory(spec, world);
  MemoryEstimate e;
  e.params = plan.peak(MemCategory::kParams);
  e.stage3_gathered = plan.bytes_of(BufferRole::kGatheredParams);
  e.grads = plan.peak(MemCategory::kGrads);
  e.optimizer = plan.peak(MemCategory::kOptimizer);
  e.activations = plan.peak(MemCategory::kActivations);
  e.buffers = plan.peak(MemCategory::kCommBuffers);
  e.host = plan.peak(MemCategory::kHostOffload);
  e.nvme = plan.peak(MemCategory::kNvme);
  return e;
}

int64_t MemoryEstimate::of(MemCategory category) const {
  switch (category) {
    case MemCategory::kParams:
      return params;
    case MemCategory::kGrads:
      return grads;
    case MemCategory::kOptimizer:
      return optimizer;
    case MemCategory::kActivations:
      return activations;
    case MemCategory::kCommBuffers:
      return buffers_peak();
    case MemCategory::kHostOffload:
      return host;
    case MemCategory::kNvme:
      return nvme;
    case MemCategory::kCount:
      break;
  }
  fail("MemoryEstimate::of: not a category");
}

int64_t checkpoint_data_bytes(const EngineSpec& spec, bool frozen_as_digest) {
  const ParamLayout layout(spec.model);
  const int64_t trained = spec.trainable.state_numel(layout);
  const int64_t frozen = frozen_as_digest ? 0 : layout.total_numel() - trained;
  const int64_t trained_bytes = 3 * static_cast<int64_t>(sizeof(float));  // master, m, v
  return trained * trained_bytes +
         frozen * static_cast<int64_t>(dtype_size(working_dtype(spec.precision)));
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

FitRecommendation recommend_configuration(const EngineSpec& spec, int world, int64_t device_bytes,
                                          bool bf16_gradient_copies) {
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
  cpu_optimizer.bf16_gradient_copies = cpu_all.bf16_gradient_copies = bf16_gradient_copies;
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

#include "engine/zero_config.h"

#include <cmath>

#include "util/error.h"

namespace zt {

Precision parse_precision(const std::string& s) {
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp32") return Precision::kFp32;
  fail("unknown precision '" + s + "' (expected bf16 or fp32)");
}

const char* precision_name(Precision p) {
  return p == Precision::kBf16 ? "bf16" : "fp32";
}

void ZeroConfig::validate() const {
  ZT_CHECK(stage >= 0 && stage <= 3,
           "zero_optimization.stage must be 0, 1, 2 or 3, got " + std::to_string(stage));
  auto positive = [](int64_t v, const char* key) {
    ZT_CHECK(v > 0, std::string("zero_optimization.") + key + " must be positive, got " +
                        std::to_string(v));
  };
  positive(reduce_bucket_size, "reduce_bucket_size");
  positive(allgather_bucket_size, "allgather_bucket_size");
  positive(prefetch_bucket_size, "stage3_prefetch_bucket_size");
  positive(max_live_parameters, "stage3_max_live_parameters");
  ZT_CHECK(param_persistence_threshold >= 0,
           "zero_optimization.stage3_param_persistence_threshold must be >= 0");
  ZT_CHECK(max_reuse_distance >= 0, "zero_optimization.stage3_max_reuse_distance must be >= 0");
}

float learning_rate_at(const AdamWConfig& c, int64_t step, int64_t total_steps) {
  // step is 1-based.
  if (c.warmup_steps > 0 && step <= c.warmup_steps)
    return c.lr * static_cast<float>(step) / static_cast<float>(c.warmup_steps);
  const int64_t decay_steps = total_steps - c.warmup_steps;
  if (decay_steps <= 0) return c.lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - c.warmup_steps) / static_cast<double>(decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(c.min_lr + (c.lr - c.min_lr) * cosine);
}

}  // namespace zt

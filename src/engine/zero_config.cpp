#include "engine/zero_config.h"

#include <cmath>

#include "comm/rank_tree_schedule.h"
#include "engine/stage_traits.h"
#include "util/error.h"

namespace zt {

Precision parse_precision(const std::string& s) {
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp32") return Precision::kFp32;
  if (s == "fp16") return Precision::kFp16;
  fail("unknown precision '" + s + "' (expected bf16, fp16 or fp32)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp32:
      break;
  }
  return "fp32";
}

DType working_dtype(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return DType::kBf16;
    case Precision::kFp16:
      return DType::kFloat16;
    case Precision::kFp32:
      break;
  }
  return DType::kFloat32;
}

void ZeroConfig::validate() const {
  // Named as both: the command-line option and the DeepSpeed key it maps.
  StageTraits::of(stage);  // the stage's range, named as the option and the key
  auto positive = [](int64_t v, const char* option, const char* key) {
    ZT_CHECK(v > 0, std::string("--") + option + " (zero_optimization." + key +
                        ") must be positive, got " + std::to_string(v));
  };
  positive(reduce_bucket_size, "reduce-bucket-size", "reduce_bucket_size");
  positive(allgather_bucket_size, "allgather-bucket-size", "allgather_bucket_size");
  // 0 is DeepSpeed's too (axolotl's stage 3 configs give it): nothing is prefetched, and no
  // group is kept for a reuse.
  auto non_negative = [](int64_t v, const char* option, const char* key) {
    ZT_CHECK(v >= 0, std::string("--") + option + " (zero_optimization." + key +
                         ") must be >= 0, got " + std::to_string(v));
  };
  non_negative(prefetch_bucket_size, "prefetch-bucket-size", "stage3_prefetch_bucket_size");
  non_negative(max_live_parameters, "max-live-parameters", "stage3_max_live_parameters");
  non_negative(param_persistence_threshold, "param-persistence-threshold",
               "stage3_param_persistence_threshold");
  non_negative(max_reuse_distance, "max-reuse-distance", "stage3_max_reuse_distance");
}

void check_world_invariant_shape(int world, int64_t grad_accum) {
  ZT_CHECK(is_power_of_two_world(world),
           "--world-invariant needs a power-of-two number of ranks (1, 2, 4, 8, ...); this job "
           "has " +
               std::to_string(world) +
               " (without it, results match other world sizes only to a "
               "tolerance)");
  ZT_CHECK(is_power_of_two_world(grad_accum),
           "--world-invariant needs a power-of-two number of micro-batches per rank "
           "(gradient_accumulation_steps); got " +
               std::to_string(grad_accum));
}

}  // namespace zt

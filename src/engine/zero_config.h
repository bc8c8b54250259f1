// ZeRO engine configuration (DeepSpeed's zero_optimization keys) and training precision; the
// optimizer's settings are engine/adamw_config.h.
#pragma once
#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "engine/adamw_config.h"

namespace zt {

// Working params: bf16 (default), fp16 (with loss scaling, engine/loss_scaler.h) or fp32. The
// masters, moments and gradient accumulation are fp32 in every mode.
enum class Precision { kBf16, kFp32, kFp16 };
Precision parse_precision(const std::string& s);  // "bf16" | "fp32" | "fp16"
const char* precision_name(Precision p);
// The storage type of the working params: bf16, fp16 or fp32.
DType working_dtype(Precision p);
// Whether each use of a group widens its 16-bit working params into an fp32 copy: with fp32
// activations yes (the ops then read fp32 weights, results as before views existed); with 16-bit
// activations the ops read the params as stored.
inline bool upcasts_working_params(Precision p, DType activation_storage) {
  return p != Precision::kFp32 && activation_storage == DType::kFloat32;
}

struct ZeroConfig {
  int stage = 0;                                  // 0..3
  bool overlap_comm = true;                       // async collectives overlap compute
  int64_t reduce_bucket_size = 500'000'000;       // elements per gradient reduce bucket
  int64_t allgather_bucket_size = 500'000'000;    // elements per param all-gather (stage 1/2)
  int64_t prefetch_bucket_size = 50'000'000;      // stage 3: elements in flight ahead of use
  int64_t param_persistence_threshold = 100'000;  // stage 3: groups below stay gathered
  int64_t max_live_parameters = 1'000'000'000;    // stage 3: gathered elements at once
  int64_t max_reuse_distance = 1'000'000'000;     // stage 3: keep if reused within (elements)
  // World-invariant training (docs/ARCHITECTURE.md §4): every sum of a step is associated by
  // the global index of its micro-batch or element, so the bits do not depend on the world size.
  bool world_invariant = false;
  void validate() const;  // throws naming the bad key

  // Elements per block of the world-invariant gradient norm; shards are whole blocks.
  static constexpr int64_t kInvariantNormBlock = 8192;
  int64_t shard_alignment() const { return world_invariant ? kInvariantNormBlock : 1; }
};

// World-invariant training needs a power-of-two number of ranks and of micro-batches per rank
// (the tree over a step's micro-batches); throws naming the one that is not.
void check_world_invariant_shape(int world, int64_t grad_accum);

}  // namespace zt

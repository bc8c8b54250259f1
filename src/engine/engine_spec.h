// What a ZeroEngine is built for, as typed values: the model, ZeRO, the precision and the
// activations' storage, one micro-batch's shape, activation checkpointing, offload, the trainable
// set, AdamW and fp16 loss scaling. A command resolves its options into one (strings parsed,
// "auto" decided) and validates it once; the engine allocates and computes by it, and the
// estimator (engine/estimator.h) sums what the engine would allocate for it. Neither re-validates.
#pragma once
#include <cstdint>

#include "engine/adamw_config.h"
#include "engine/loss_scaler.h"
#include "engine/offload/offload_config.h"
#include "engine/zero_config.h"
#include "model/config.h"
#include "model/llama.h"
#include "model/trainable.h"

namespace zt {

struct EngineSpec {
  ModelConfig model;
  ZeroConfig zero;
  Precision precision = Precision::kBf16;
  // Where activations are kept: fp32, or the working params' own 16-bit type.
  DType activation_storage = DType::kFloat32;
  int64_t micro_batch = 1;  // sequences per micro-batch of one rank
  int64_t seq_len = 1;      // tokens per sequence
  int64_t grad_accum = 1;   // micro-batches per rank per optimizer step
  ActivationCheckpointing ac;
  OffloadConfig offload;
  TrainableSet trainable;  // empty: every tensor trains
  AdamWConfig optim;
  LossScaleConfig loss_scale;  // Precision::kFp16 only

  // Throws zt::Error naming the setting (the option, and the DeepSpeed key where one maps): the
  // ZeRO keys, offload at this stage, the loss scaling of an fp16 run, sizes that are not
  // positive, the world-invariant shape of `world` ranks, and a trainable set made for another
  // model. (The activations' storage is checked where --activations is parsed,
  // app/engine_device.h.)
  void validate(int world) const;
};

// The activations' storage as a word (--activations, run.json's "activations" and its engine's
// "activation_storage"): "fp32", "bf16" or "fp16"; anything else is a zt::Error "<what> must be
// fp32, bf16 or fp16, got '...'".
DType parse_activation_storage(const std::string& text, const std::string& what);
const char* activation_storage_name(DType storage);

}  // namespace zt

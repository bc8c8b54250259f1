// The EngineSpec (engine/engine_spec.h) a test builds an engine or an estimate for: the model, ZeRO
// and one micro-batch's shape; every other setting at its default (bf16 working params, fp32
// activations, one micro-batch per step, no checkpointing or offload, every tensor trains), for
// the caller to set the ones it varies.
#pragma once
#include <cstdint>

#include "engine/engine_spec.h"

namespace zt {

inline EngineSpec engine_spec_for(const ModelConfig& model, const ZeroConfig& zero,
                                  int64_t micro_batch, int64_t seq_len) {
  EngineSpec spec;
  spec.model = model;
  spec.zero = zero;
  spec.micro_batch = micro_batch;
  spec.seq_len = seq_len;
  return spec;
}

}  // namespace zt

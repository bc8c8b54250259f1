// The dropout mask of LoRA's adapter inputs (docs/lora.md), one counter-based hash on every
// backend and rank: element e of stream s is kept when dropout_uniform(s, e) >= p. A stream is
// one (seed, layer, projection); an element is (global token index)·K + column, so a mask does
// not depend on the world size, the ZeRO stage or which rank computes the token. The uniform is
// the top 24 bits of splitmix64(s ^ splitmix64(e)) over 2^24: exact in fp32.
#pragma once
#include <cstdint>

#include "util/splitmix64.h"

namespace zt {

ZT_HOST_DEVICE inline float dropout_uniform(uint64_t stream, uint64_t element) {
  const uint64_t r = splitmix64(stream ^ splitmix64(element));
  return static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
}

// The stream of one adapted projection: `target` a LoraTarget (0..8) of decoder layer `layer`.
// Phi-3's gate_up_proj (8) meets the next layer's q_proj (0), which a Phi-3 model has not.
inline uint64_t dropout_stream(uint64_t seed, int64_t layer, int target) {
  return splitmix64(splitmix64(seed) + static_cast<uint64_t>(layer) * 8 +
                    static_cast<uint64_t>(target));
}

}  // namespace zt

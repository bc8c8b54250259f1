// The dropout mask of LoRA's adapter inputs (docs/lora.md), one counter-based hash on every
// backend and rank: element e of stream s is kept when dropout_uniform(s, e) >= p. A stream is
// one (seed, layer, projection); an element is (global token index)·K + column, so a mask does
// not depend on the world size, the ZeRO stage or which rank computes the token. The uniform is
// the top 24 bits of splitmix64(s ^ splitmix64(e)) over 2^24: exact in fp32.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

namespace zt {

ZT_HOST_DEVICE inline uint64_t dropout_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

ZT_HOST_DEVICE inline float dropout_uniform(uint64_t stream, uint64_t element) {
  const uint64_t r = dropout_mix(stream ^ dropout_mix(element));
  return static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
}

// The stream of one adapted projection: `target` a LoraTarget (0..6) of decoder layer `layer`.
inline uint64_t dropout_stream(uint64_t seed, int64_t layer, int target) {
  return dropout_mix(dropout_mix(seed) + static_cast<uint64_t>(layer) * 8 +
                     static_cast<uint64_t>(target));
}

}  // namespace zt

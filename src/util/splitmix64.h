// splitmix64's finalizer: a bijective 64-bit mix (Steele, Lea and Flood), callable from host code
// and CUDA kernels alike. The counter-based hashes that must agree across backends build on it:
// LoRA dropout's mask (backend/dropout_hash.h) and the GEMM output fingerprint
// (backend/gemm_tuning.h).
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

namespace zt {

ZT_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace zt

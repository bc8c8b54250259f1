// Device loads and stores of activations in their storage type (cuda_storage.h): a kernel is a
// template over the element type of its activations (A) and, where it reads a working parameter,
// of that parameter (W): float, bf16 held as its uint16_t bits, or fp16 (Fp16Bits). Every kernel
// computes in fp32: load() widens (exact), store() rounds once to nearest even (the rules of
// util/bf16.h; fp16 overflows to ±inf as __float2half_rn does, NaN bits as the CPU's), so a 16-bit
// output is the fp32 result rounded once, as the CPU backend rounds it.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_storage.h"

namespace zt::cuda {

__device__ __forceinline__ float load(const float* p, int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load(const Bf16Bits* p, int64_t i) {
  return bf16_bits_to_float(p[i]);
}
__device__ __forceinline__ void store(float* p, int64_t i, float value) {
  p[i] = value;
}
__device__ __forceinline__ void store(Bf16Bits* p, int64_t i, float value) {
  p[i] = float_to_bf16_bits(value);
}
// NaN is widened and narrowed by hand, as util/bf16.h does (the payload kept going up, sign|0x7e00
// going down): the hardware conversions give a canonical NaN, whose bits differ from the CPU's.
__device__ __forceinline__ float load(const Fp16Bits* p, int64_t i) {
  const uint16_t bits = p[i].bits;
  if ((bits & 0x7c00u) == 0x7c00u && (bits & 0x03ffu) != 0)
    return __uint_as_float((static_cast<uint32_t>(bits & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<uint32_t>(bits & 0x03ffu) << 13));
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ void store(Fp16Bits* p, int64_t i, float value) {
  p[i].bits = isnan(value)
                  ? static_cast<uint16_t>(((__float_as_uint(value) >> 16) & 0x8000u) | 0x7e00u)
                  : __half_as_ushort(__float2half_rn(value));
}

}  // namespace zt::cuda

// Device loads and stores of activations in their storage type (cuda_storage.h): a kernel is a
// template over the element type of its activations (A) and, where it reads a working parameter,
// of that parameter (W): float, or bf16 held as its uint16_t bits. Every kernel computes in fp32:
// load() widens (exact), store() rounds once to nearest even (the rule of util/bf16.h), so a bf16
// output is the fp32 result rounded once, as the CPU backend rounds it.
#pragma once
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

}  // namespace zt::cuda

// Device helpers shared by the kernels: fixed-order warp and block reductions (no atomics, so
// every reduction is a fixed function of blockDim: bitwise reproducible), grid sizing, and the
// bf16 rounding rule of util/bf16.h.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace zt::cuda {

constexpr int kWarpSize = 32;
constexpr int kRowThreads = 256;          // threads per block for one-row-per-block kernels
constexpr int kElementwiseThreads = 256;  // threads per block for elementwise kernels
constexpr int64_t kMaxElementwiseBlocks = 8192;

// Butterfly sum over the 32 lanes: every lane ends with the same value, in a fixed order.
template <typename T>
__device__ __forceinline__ T warp_sum(T value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result. Warp
// sums, then warp 0 sums the per-warp values. Contains __syncthreads: call from all threads.
template <typename T>
__device__ T block_sum(T value) {
  __shared__ T warp_totals[kWarpSize];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  value = warp_sum(value);
  __syncthreads();  // warp_totals may still be read by a previous call
  if (lane == 0) warp_totals[warp] = value;
  __syncthreads();
  if (warp == 0) {  // only warp 0 reads the slots, so thread 0's write below races no reader
    const T total = warp_sum(lane < warps ? warp_totals[lane] : T(0));
    if (lane == 0) warp_totals[0] = total;
  }
  __syncthreads();
  return warp_totals[0];
}

// Blocks for a grid-stride elementwise loop over n elements.
inline unsigned elementwise_blocks(int64_t n) {
  int64_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  if (blocks > kMaxElementwiseBlocks) blocks = kMaxElementwiseBlocks;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// fp32 → bf16 bits, round to nearest even, NaN → quiet NaN: the rule of zt::float_to_bf16
// (util/bf16.h), which the GPU tests compare against bit for bit.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

}  // namespace zt::cuda

// CUDA backend: the fused softmax + cross-entropy of the head's logits, forward and backward in
// one kernel (backend.h's cross_entropy):
//   loss_m = lse_m − x[m, t_m],  lse_m = max + log Σ_j exp(x[m, j] − max)
//   dlogits[m, j] = (exp(x[m, j] − max)/Σ − [j = t_m]) · grad_scale
// One block per row of V logits, which it reads twice and writes once: a bandwidth-bound pass
// (V = 32000 to 128256, 8192 rows a micro-batch). Each thread takes groups of kChunk logits
// (consecutive ones in 16-byte accesses where the rows are aligned, blockDim apart otherwise:
// Group), forms each group's (max, Σ exp) in fp32 and merges it into its own pair, whose sum is
// a double; the block then merges the threads' pairs (block_max_sum).
#include <cmath>
#include <type_traits>

#include "backend/cuda/cuda_elementwise.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_storage.cuh"
#include "util/cuda/cuda_check.h"
#include "util/ignored_target.h"

namespace zt::cuda {
namespace {

// Online (max, Σ exp) pair: merging (m1, s1) and (m2, s2) gives (m, s1·e^(m1−m) + s2·e^(m2−m)).
struct MaxSum {
  float max;
  double sum;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (b.sum == 0.0) return a;
  if (a.sum == 0.0) return b;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * static_cast<double>(expf(a.max - m)) +
                 b.sum * static_cast<double>(expf(b.max - m))};
}

__device__ MaxSum block_max_sum(MaxSum value) {
  __shared__ float maxes[kWarpSize];
  __shared__ double sums[kWarpSize];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, value.max, offset),
                       __shfl_xor_sync(0xffffffffu, value.sum, offset)};
    value = merge(value, other);
  }
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    maxes[warp] = value.max;
    sums[warp] = value.sum;
  }
  __syncthreads();
  if (warp == 0) {
    const bool present = lane < static_cast<int>(blockDim.x) / kWarpSize;
    value = present ? MaxSum{maxes[lane], sums[lane]} : MaxSum{-INFINITY, 0.0};
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const MaxSum other{__shfl_xor_sync(0xffffffffu, value.max, offset),
                         __shfl_xor_sync(0xffffffffu, value.sum, offset)};
      value = merge(value, other);
    }
    if (lane == 0) {
      maxes[0] = value.max;
      sums[0] = value.sum;
    }
  }
  __syncthreads();
  return {maxes[0], sums[0]};
}

// kChunk logits of a row that one thread folds at once: element first + k·stride for k < kChunk.
// Where the rows are aligned and whole chunks (`chunked`), a thread's groups are consecutive
// elements, read and written in one or two 16-byte accesses; otherwise they are blockDim apart,
// so that each of the kChunk loads is coalesced across the warp.
struct Group {
  int64_t first, stride;
};

template <typename A>
__device__ __forceinline__ void load_group(const A* row, Group g, bool chunked,
                                           float (&v)[kChunk]) {
  if (chunked) {
    ChunkAt{g.first}.load(row, v);
    return;
  }
#pragma unroll
  for (int k = 0; k < kChunk; ++k) v[k] = load(row, g.first + k * g.stride);
}
template <typename A>
__device__ __forceinline__ void store_group(A* row, Group g, bool chunked,
                                            const float (&v)[kChunk]) {
  if (chunked) {
    ChunkAt{g.first}.store(row, v);
    return;
  }
#pragma unroll
  for (int k = 0; k < kChunk; ++k) store(row, g.first + k * g.stride, v[k]);
}

// This thread's groups of a row of V logits, then (unchunked) the elements past the last whole
// span of kChunk·blockDim one by one: every element exactly once.
template <typename GroupFn, typename ElementFn>
__device__ __forceinline__ void for_row_groups(int64_t V, bool chunked, GroupFn&& group,
                                               ElementFn&& element) {
  if (chunked) {
    for (int64_t c = threadIdx.x; c < V / kChunk; c += blockDim.x) group(Group{c * kChunk, 1});
    return;
  }
  const int64_t span = static_cast<int64_t>(kChunk) * blockDim.x;
  for (int64_t base = 0; base + span <= V; base += span)
    group(Group{base + threadIdx.x, static_cast<int64_t>(blockDim.x)});
  for (int64_t j = V / span * span + threadIdx.x; j < V; j += blockDim.x) element(j);
}

// A group's pair: its maximum and Σ exp(v − max) in fp32 (at most kChunk terms, each ≤ 1). A
// group of −∞ only adds nothing (e^−∞ = 0; never e^(−∞+∞) = NaN); a NaN makes the pair NaN,
// even beside −∞ only (fmaxf would pass over it).
__device__ __forceinline__ MaxSum group_max_sum(const float (&v)[kChunk]) {
  float m = -INFINITY;
  bool nan = false;
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    m = fmaxf(m, v[j]);
    nan = nan || isnan(v[j]);
  }
  if (nan) return {NAN, NAN};
  if (m == -INFINITY) return {-INFINITY, 0.0};
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kChunk; ++j) s += expf(v[j] - m);
  return {m, static_cast<double>(s)};
}

// Every read of the row (the target logit included) happens before the block-wide reduction,
// and after it each thread reads and writes only its own groups and elements, so dlogits may
// alias logits. An
// ignored target (kIgnoredTarget) gives loss 0 and a zero dlogits row; any other out-of-range
// target a NaN loss and a NaN dlogits row. softcap c > 0: x holds soft-capped logits
// s = c·tanh(z/c), and each dlogits element is also multiplied by 1 − (s/c)² (the gradient with
// respect to z). chunked: every row starts at a 16-byte boundary and V is whole chunks.
// scale_factor: null, or a device float grad_scale is multiplied by (rounded once, as the CPU).
template <typename A>
__global__ void cross_entropy_kernel(float* losses, A* dlogits, const A* logits,
                                     const int32_t* targets, int64_t V, float grad_scale,
                                     const float* scale_factor, float softcap, bool chunked) {
  const int64_t row = blockIdx.x;
  const A* x = logits + row * V;
  const int32_t target = targets[row];
  if (target == kIgnoredTarget) {  // uniform across the block: every thread returns here
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (dlogits == nullptr) return;
    A* dx = dlogits + row * V;
    const float zeros[kChunk] = {};
    for_row_groups(
        V, chunked, [&](Group g) { store_group(dx, g, chunked, zeros); },
        [&](int64_t j) { store(dx, j, 0.0f); });
    return;
  }
  const bool valid = target >= 0 && target < V;
  const float target_logit = valid ? load(x, target) : NAN;
  MaxSum local{-INFINITY, 0.0};
  for_row_groups(
      V, chunked,
      [&](Group g) {
        float v[kChunk];
        load_group(x, g, chunked, v);
        local = merge(local, group_max_sum(v));
      },
      [&](int64_t j) {
        const float value = load(x, j);
        if (value != -INFINITY) local = merge(local, MaxSum{value, 1.0});
      });
  const MaxSum total = block_max_sum(local);
  if (threadIdx.x == 0) {
    losses[row] = static_cast<float>(static_cast<double>(total.max) + log(total.sum) -
                                     static_cast<double>(target_logit));
  }
  if (dlogits == nullptr) return;
  A* dx = dlogits + row * V;
  if (scale_factor != nullptr) grad_scale = __fmul_rn(grad_scale, *scale_factor);
  const float factor = static_cast<float>(static_cast<double>(grad_scale) / total.sum);
  const auto dlogit = [&](float s, int64_t j) {
    // The product and the difference rounded apart, as the CPU's two passes round them (nvcc
    // would otherwise fuse p − grad_scale into one FMA).
    const float p = __fmul_rn(expf(s - total.max), factor);
    const float d = !valid ? NAN : (j == target ? __fsub_rn(p, grad_scale) : p);
    const float t = softcap > 0.0f ? s / softcap : 0.0f;  // tanh(z/c) with a cap
    return softcap > 0.0f ? __fmul_rn(d, 1.0f - t * t) : d;
  };
  for_row_groups(
      V, chunked,
      [&](Group g) {
        float v[kChunk];
        load_group(x, g, chunked, v);
#pragma unroll
        for (int k = 0; k < kChunk; ++k) v[k] = dlogit(v[k], g.first + k * g.stride);
        store_group(dx, g, chunked, v);
      },
      [&](int64_t j) { store(dx, j, dlogit(load(x, j), j)); });
}

}  // namespace

void launch_cross_entropy(float* losses, TensorView dlogits, ConstTensorView logits,
                          const int32_t* targets, int64_t M, int64_t V, float grad_scale,
                          float softcap, const float* grad_scale_factor, cudaStream_t stream) {
  if (M == 0) return;
  const bool chunked = chunked_rows(V, {dlogits.data, logits.data});
  with_storage(shared_storage("cross_entropy", {dlogits, logits}), "cross_entropy", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    cross_entropy_kernel<<<static_cast<unsigned>(M), kRowThreads, 0, stream>>>(
        losses, typed<A>(dlogits), typed<A>(logits), targets, V, grad_scale, grad_scale_factor,
        softcap, chunked);
  });
  ZT_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
}

}  // namespace zt::cuda

// CUDA backend: AdamW and the deterministic sum of squares (gradient norm).
#include <algorithm>
#include <string>

#include "backend/cuda/cuda_elementwise.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

// AdamW, cpu_adam.h's definition with the same roundings (every operation spelled with an _rn
// intrinsic so that nvcc fuses nothing but the three explicit fmas):
//   g = grad·grad_scale;  m' = fma(β1, m, (1−β1)·g);  v' = fma(β2, v, (1−β2)·(g·g))
//   u = lr·(m'/bc1) / (sqrt(v'/bc2) + eps);  w' = w − fma(lr·wd, w, u)
// then w' rounded to bf16 (RNE, quiet NaN) and/or copied to fp32. An elementwise body
// (cuda_elementwise.cuh): 16-byte accesses where every buffer is aligned, the bandwidth-bound
// pass reading 16 and writing 12 to 16 bytes per element; the same arithmetic element by element.
struct AdamWUpdate {
  float *master, *m, *v;
  const float* grad;
  Bf16Bits* out_bf16;
  float* out_f32;
  AdamConstants c;
  template <typename At>
  __device__ __forceinline__ void operator()(At at) const {
    float w[At::kCount], mi[At::kCount], vi[At::kCount], g[At::kCount];
    at.load(grad, g);
    at.load(m, mi);
    at.load(v, vi);
    at.load(master, w);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j) {
      const float gj = __fmul_rn(g[j], c.grad_scale);
      mi[j] = fmaf(c.beta1, mi[j], __fmul_rn(c.one_minus_beta1, gj));
      vi[j] = fmaf(c.beta2, vi[j], __fmul_rn(c.one_minus_beta2, __fmul_rn(gj, gj)));
      const float numerator = __fmul_rn(c.lr, __fdiv_rn(mi[j], c.bc1));
      const float denominator = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi[j], c.bc2)), c.eps);
      const float step = __fdiv_rn(numerator, denominator);
      w[j] = __fsub_rn(w[j], fmaf(c.decay, w[j], step));
    }
    at.store(m, mi);
    at.store(v, vi);
    at.store(master, w);
    if (out_bf16) at.store(out_bf16, w);
    if (out_f32) at.store(out_f32, w);
  }
};

// Σ x² of each sum of a batch, pass 1, grid (kSumSquaresBlocks, sums): sum blockIdx.y's
// kSumSquaresBlocks blocks (a constant, not the device's SM count; global_thread and grid_threads
// count along x alone), each thread a grid-stride sequence in double, then a block tree → its
// partials[block].
__global__ void sum_squares_partials_kernel(double* partials, SquaresSumBatch batch) {
  const int s = static_cast<int>(blockIdx.y);
  const float* x = batch.x[s];
  const int64_t n = batch.n[s];
  double acc = 0.0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const double value = x[i];
    acc += value * value;
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) partials[static_cast<int64_t>(s) * kSumSquaresBlocks + blockIdx.x] = total;
}

// Pass 2: one block of kSumSquaresBlocks threads per sum adds its partials with the same tree.
__global__ void sum_squares_finish_kernel(const double* partials, SquaresSumBatch batch) {
  const int s = static_cast<int>(blockIdx.x);
  const double total =
      block_sum(partials[static_cast<int64_t>(s) * kSumSquaresBlocks + threadIdx.x]);
  if (threadIdx.x == 0) *batch.out[s] = total;
}

// Σ x² of one block of x per CUDA block: strided per-thread sums in double, then the block tree.
// The order depends on the block's length only.
__global__ void block_sum_squares_kernel(double* out, const float* x, int64_t n, int64_t block) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * block;
  const int64_t end = begin + block < n ? begin + block : n;
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double value = x[i];
    acc += value * value;
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

}  // namespace

// A shard that starts off 16-byte alignment (stage 3 at world > 1 cuts its flat buffers at any
// element) has its first elements, up to where every buffer is aligned, updated one by one and the
// rest in 16-byte accesses; buffers misaligned to one another go element by element throughout.
// The same arithmetic either way, so the same bits.
void launch_adamw(float* master, float* m, float* v, const float* grad, uint16_t* out_bf16,
                  float* out_f32, int64_t n, const AdamConstants& c, cudaStream_t stream) {
  if (n == 0) return;
  constexpr size_t kF32 = sizeof(float), kBf16 = sizeof(uint16_t);
  const int64_t head = std::min(
      n,
      elements_to_alignment(
          {{master, kF32}, {m, kF32}, {v, kF32}, {grad, kF32}, {out_bf16, kBf16}, {out_f32, kF32}},
          kChunk));
  const auto from = [&](int64_t at) {  // the update of elements at.. (null outputs stay null)
    return AdamWUpdate{master + at,
                       m + at,
                       v + at,
                       grad + at,
                       out_bf16 ? out_bf16 + at : nullptr,
                       out_f32 ? out_f32 + at : nullptr,
                       c};
  };
  if (head > 0) launch_elementwise("adamw", from(0), head, {}, stream, /*chunkable=*/false);
  const AdamWUpdate rest = from(head);
  launch_elementwise("adamw", rest, n - head,
                     {rest.master, rest.m, rest.v, rest.grad, rest.out_bf16, rest.out_f32}, stream);
}

void launch_sum_squares(double* result, double* partials, const float* x, int64_t n,
                        cudaStream_t stream) {
  SquaresSumBatch one;
  one.x[0] = x, one.n[0] = n, one.out[0] = result, one.count = 1;
  launch_sum_squares_batch(one, partials, stream);
}

void launch_sum_squares_batch(const SquaresSumBatch& batch, double* partials, cudaStream_t stream) {
  static_assert(kSumSquaresBlocks % kWarpSize == 0 && kSumSquaresBlocks <= 1024,
                "the finishing block has one thread per partial");
  ZT_CHECK(batch.count >= 0 && batch.count <= kSumSquaresBatch,
           "launch_sum_squares_batch: " + std::to_string(batch.count) + " sums (at most " +
               std::to_string(kSumSquaresBatch) + ")");
  if (batch.count == 0) return;
  const dim3 grid(kSumSquaresBlocks, static_cast<unsigned>(batch.count));
  sum_squares_partials_kernel<<<grid, kElementwiseThreads, 0, stream>>>(partials, batch);
  ZT_CUDA_CHECK_LAUNCH("sum_squares_partials_kernel");
  sum_squares_finish_kernel<<<static_cast<unsigned>(batch.count), kSumSquaresBlocks, 0, stream>>>(
      partials, batch);
  ZT_CUDA_CHECK_LAUNCH("sum_squares_finish_kernel");
}

void launch_block_sum_squares(double* out, const float* x, int64_t n, int64_t block,
                              cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = (n + block - 1) / block;
  block_sum_squares_kernel<<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(out, x, n,
                                                                                      block);
  ZT_CUDA_CHECK_LAUNCH("block_sum_squares_kernel");
}

}  // namespace zt::cuda

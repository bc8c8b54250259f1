// Column sums over rows on the device, deterministic without atomics: out[n] += Σ_m term(m, n)
// for a [M, N] operand (rmsnorm's dg, a linear bias's gradient). Two passes: each chunk of
// rows_per_chunk rows sums its column in double, rows in order, into partials[chunk][n]; then one
// thread per column adds the chunks in order and rounds once. The order depends on M, N and
// rows_per_chunk only. term is a copyable functor with `__device__ double operator()(m, n)`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_reduce.cuh"
#include "util/cuda/cuda_check.h"

namespace zt::cuda {

// Pass 1, grid (column blocks, chunks): one thread per column (coalesced over n).
template <typename Term>
__global__ void column_sum_partials_kernel(double* partials, Term term, int64_t M, int64_t N,
                                           int64_t rows_per_chunk) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t chunk = blockIdx.y;
  const int64_t m0 = chunk * rows_per_chunk;
  const int64_t m1 = m0 + rows_per_chunk < M ? m0 + rows_per_chunk : M;
  double acc = 0.0;
  for (int64_t m = m0; m < m1; ++m) acc += term(m, n);
  partials[chunk * N + n] = acc;
}

// Pass 2: out[n] += Σ_c partials[c][n], chunks in order (assign: out[n] =, whatever it held).
static __global__ void column_sum_finish_kernel(float* out, const double* partials, int64_t chunks,
                                                int64_t N, bool assign) {
  const int64_t n = global_thread();
  if (n >= N) return;
  double acc = 0.0;
  for (int64_t c = 0; c < chunks; ++c) acc += partials[c * N + n];
  out[n] = assign ? static_cast<float>(acc) : out[n] + static_cast<float>(acc);
}

// Enqueues both passes; partials holds ⌈M / rows_per_chunk⌉·N doubles of device scratch. With
// `assign`, out = the sums (no pass reads it), else out += them.
template <typename Term>
void launch_column_sums(float* out, double* partials, Term term, int64_t M, int64_t N,
                        int64_t rows_per_chunk, cudaStream_t stream, bool assign = false) {
  if (M == 0 || N == 0) return;
  const int64_t chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
  const unsigned column_blocks = static_cast<unsigned>((N + kRowThreads - 1) / kRowThreads);
  column_sum_partials_kernel<<<dim3(column_blocks, static_cast<unsigned>(chunks)), kRowThreads, 0,
                               stream>>>(partials, term, M, N, rows_per_chunk);
  ZT_CUDA_CHECK_LAUNCH("column_sum_partials_kernel");
  column_sum_finish_kernel<<<column_blocks, kRowThreads, 0, stream>>>(out, partials, chunks, N,
                                                                      assign);
  ZT_CUDA_CHECK_LAUNCH("column_sum_finish_kernel");
}

}  // namespace zt::cuda

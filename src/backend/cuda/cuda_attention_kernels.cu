// CUDA backend: the row-wise parts of causal attention (the products QKᵀ, P·V and their gradients
// are cuBLASLt GEMMs, cuda_attention.cpp). One block per score row; fixed-order block
// reductions, so both kernels are deterministic.
#include <cmath>

#include "backend/attention_scores.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "util/cuda/cuda_check.h"

namespace zt::cuda {
namespace {

// Block max (exact in any order).
__device__ float block_max(float value) {
  __shared__ float warp_max[kWarpSize];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  __syncthreads();
  if (lane == 0) warp_max[warp] = value;
  __syncthreads();
  if (warp == 0) {  // only warp 0 reads the slots, so lane 0's write below races no reader
    float result = lane < static_cast<int>(blockDim.x) / kWarpSize ? warp_max[lane] : -INFINITY;
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
      result = fmaxf(result, __shfl_xor_sync(0xffffffffu, result, offset));
    if (lane == 0) warp_max[0] = result;
  }
  __syncthreads();
  return warp_max[0];
}

// The first key row i sees: its document's first token or its window's, whichever is later
// (backend/attention_scores.h, as the CPU attention).
__device__ int64_t first_visible_key(const AttentionPass& pass, int64_t i) {
  return zt::first_visible_key(i, pass.doc_start ? pass.doc_start[i] : 0, pass.window);
}

// A score under the soft cap c: c·tanh(s/c) (attention_scores.h); s itself without one (c = 0).
__device__ float capped_score(float s, float cap) {
  return cap > 0.0f ? cap * tanhf(s / cap) : s;
}

// Forward, row i of local head c (keys lo ≤ j ≤ i visible, lo = first_visible_key): s_j capped
// in place, then p_j = exp(s_j − max)/Σ (fp32 exp, double sum), 0 for other j;
// lse_i = max + log Σ. (block_max's barrier orders the capping before the other loops.)
__global__ void attention_softmax_kernel(float* scores, AttentionPass pass) {
  const int64_t r = blockIdx.x;  // c·T + i
  const int64_t c = r / pass.T;
  const int64_t i = r % pass.T;
  const int64_t lo = first_visible_key(pass, i);
  float* s = scores + r * pass.T;
  float local_max = -INFINITY;
  for (int64_t j = lo + threadIdx.x; j <= i; j += blockDim.x) {
    s[j] = capped_score(s[j], pass.softcap);
    local_max = fmaxf(local_max, s[j]);
  }
  const float row_max = block_max(local_max);
  double local_sum = 0.0;
  for (int64_t j = lo + threadIdx.x; j <= i; j += blockDim.x)
    local_sum += static_cast<double>(expf(s[j] - row_max));
  const double sum = block_sum(local_sum);
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (int64_t j = threadIdx.x; j < pass.T; j += blockDim.x)
    s[j] = lo <= j && j <= i ? expf(s[j] - row_max) * inv_sum : 0.0f;
  if (threadIdx.x == 0)
    pass.lse[c * pass.lse_head_stride + i] = row_max + static_cast<float>(log(sum));
}

// Backward, row i of local head c: D_i = dout_i·out_i (double); p_j = exp(s_j − lse_i) and
// ds_j = p_j·(dP_j − D_i)·scale for lo ≤ j ≤ i (s_j capped first and ds_j times 1 − (s_j/c)² under
// a soft cap c), both 0 for the keys row i does not see.
__global__ void attention_backward_rows_kernel(float* probs, float* dscores, AttentionPass pass) {
  const int64_t r = blockIdx.x;
  const int64_t c = r / pass.T;
  const int64_t i = r % pass.T;
  const float* dout_row = pass.dout + i * pass.row_stride + c * pass.head_stride;
  const float* out_row = pass.out + i * pass.row_stride + c * pass.head_stride;
  double local_dot = 0.0;
  for (int64_t d = threadIdx.x; d < pass.hd; d += blockDim.x)
    local_dot += static_cast<double>(dout_row[d]) * out_row[d];
  const float dout_dot_out = static_cast<float>(block_sum(local_dot));
  const float row_lse = pass.lse[c * pass.lse_head_stride + i];
  float* p = probs + r * pass.T;
  float* ds = dscores + r * pass.T;
  const int64_t lo = first_visible_key(pass, i);
  for (int64_t j = threadIdx.x; j < pass.T; j += blockDim.x) {
    if (lo <= j && j <= i) {
      const float s = capped_score(p[j], pass.softcap);
      const float t = pass.softcap > 0.0f ? s / pass.softcap : 0.0f;  // tanh(s/c)
      const float pj = expf(s - row_lse);
      p[j] = pj;
      ds[j] = pj * (ds[j] - dout_dot_out) * pass.scale * (1.0f - t * t);
    } else {
      p[j] = 0.0f;
      ds[j] = 0.0f;
    }
  }
}

// Element n of the head-major lse, (b·H + h)·T + t, and its token-major twin (b·T + t)·H + h.
__global__ void transpose_attention_stats_kernel(float* dst, const float* src, int64_t B, int64_t T,
                                                 int64_t H, bool to_heads) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= B * H * T) return;
  const int64_t t = n % T, h = (n / T) % H, b = n / (T * H);
  const int64_t token_major = (b * T + t) * H + h;
  if (to_heads)
    dst[n] = src[token_major];
  else
    dst[token_major] = src[n];
}

// Rows shorter than a warp waste most of a 256-thread block; size the block to the row.
unsigned row_threads(int64_t T) {
  return T <= 64 ? 64u : (T <= 128 ? 128u : static_cast<unsigned>(kRowThreads));
}

}  // namespace

void launch_attention_softmax(float* scores, const AttentionPass& pass, cudaStream_t stream) {
  const int64_t rows = pass.heads * pass.T;
  if (rows == 0) return;
  attention_softmax_kernel<<<static_cast<unsigned>(rows), row_threads(pass.T), 0, stream>>>(scores,
                                                                                            pass);
  ZT_CUDA_CHECK_LAUNCH("attention_softmax_kernel");
}

void launch_attention_backward_rows(float* probs, float* dscores, const AttentionPass& pass,
                                    cudaStream_t stream) {
  const int64_t rows = pass.heads * pass.T;
  if (rows == 0) return;
  attention_backward_rows_kernel<<<static_cast<unsigned>(rows), row_threads(pass.T), 0, stream>>>(
      probs, dscores, pass);
  ZT_CUDA_CHECK_LAUNCH("attention_backward_rows_kernel");
}

void launch_transpose_attention_stats(float* dst, const float* src, int64_t B, int64_t T, int64_t H,
                                      bool to_heads, cudaStream_t stream) {
  const int64_t n = B * H * T;
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  transpose_attention_stats_kernel<<<blocks, kThreads, 0, stream>>>(dst, src, B, T, H, to_heads);
  ZT_CUDA_CHECK_LAUNCH("transpose_attention_stats_kernel");
}

}  // namespace zt::cuda

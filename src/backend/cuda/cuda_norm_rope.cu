// CUDA backend: RMSNorm and rotary position embedding, forward and backward side by side.
// Activations and the norm weight in either storage type (cuda_storage.cuh): read widened,
// computed in fp32, each output rounded once.
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_column_sum.cuh"
#include "backend/cuda/cuda_elementwise.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_storage.cuh"
#include "util/cuda/cuda_check.h"

namespace zt::cuda {
namespace {

// ---- RMSNorm (rows in 16-byte chunks where they allow it: for_row, cuda_elementwise.cuh) ----
// Forward, one block per row: rstd = 1/sqrt(mean_d x² + eps) (fp32 block sum);
// y = (o + g)·(x·rstd), o = weight_offset (Gemma's 1).
template <typename A, typename W>
__global__ void rmsnorm_forward_kernel(A* y, float* rstd, const A* x, const W* g, int64_t D,
                                       float eps, float weight_offset, bool chunked) {
  const int64_t row = blockIdx.x;
  const A* xr = x + row * D;
  float acc = 0.0f;
  for_row(D, chunked, [&](auto at) {
    using At = decltype(at);
    float v[At::kCount];
    at.load(xr, v);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j) acc += v[j] * v[j];
  });
  const float mean_square = block_sum(acc) / static_cast<float>(D);
  const float r = 1.0f / sqrtf(mean_square + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  A* yr = y + row * D;
  for_row(D, chunked, [&](auto at) {
    using At = decltype(at);
    float v[At::kCount], gain[At::kCount];
    at.load(xr, v);
    at.load(g, gain);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j) v[j] = (weight_offset + gain[j]) * (v[j] * r);
    at.store(yr, v);
  });
}

// Backward dx, one block per row: dx += rstd·(w·dy) − x·rstd³·mean_d(w·dy·x), w = o + g.
// dx is accumulated: read, added to in fp32, rounded once.
template <typename A, typename W>
__global__ void rmsnorm_backward_dx_kernel(A* dx, const A* dy, const A* x, const W* g,
                                           const float* rstd, int64_t D, float weight_offset,
                                           bool chunked) {
  const int64_t row = blockIdx.x;
  const A* xr = x + row * D;
  const A* dyr = dy + row * D;
  float acc = 0.0f;
  for_row(D, chunked, [&](auto at) {
    using At = decltype(at);
    float gain[At::kCount], grad[At::kCount], v[At::kCount];
    at.load(g, gain);
    at.load(dyr, grad);
    at.load(xr, v);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j) acc += ((weight_offset + gain[j]) * grad[j]) * v[j];
  });
  const float r = rstd[row];
  const float coef = block_sum(acc) / static_cast<float>(D) * r * r * r;
  A* dxr = dx + row * D;
  for_row(D, chunked, [&](auto at) {
    using At = decltype(at);
    float gain[At::kCount], grad[At::kCount], v[At::kCount], out[At::kCount];
    at.load(g, gain);
    at.load(dyr, grad);
    at.load(xr, v);
    at.load(dxr, out);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j)
      out[j] = out[j] + (r * ((weight_offset + gain[j]) * grad[j]) - v[j] * coef);
    at.store(dxr, out);
  });
}

// Backward dg's term: dy·x·rstd of row m, column d (summed over rows by cuda_column_sum.cuh).
template <typename A>
struct RmsnormDgTerm {
  const A* dy;
  const A* x;
  const float* rstd;
  int64_t D;
  __device__ double operator()(int64_t m, int64_t d) const {
    return static_cast<double>(load(dy, m * D + d) * load(x, m * D + d) * rstd[m]);
  }
};

// ---- RoPE (rotate-half; GLM's adjacent pairs) ----
// Over pairs (b, t, h, i < r/2) of the r rotated leading elements of each head (the rest pass
// through): x1' = x1·c − x2·(σs), x2' = x2·c + x1·(σs), x1 = x[i], x2 = x[i + r/2] (interleaved:
// x1 = x[2i], x2 = x[2i + 1], one pair per thread, never chunked). The explicit
// _rn intrinsics keep nvcc from fusing into FMAs, so the result is the CPU's bit for bit (same
// table, same unfused fp32 operations). A chunk (cuda_elementwise.cuh) is kChunk consecutive i of
// one head, which needs r/2 and hd to be multiples of kChunk. Index: the type a pair's position
// is taken apart in, 32-bit where every pair's index fits (divisions by H, T and r/2 are several
// times cheaper than 64-bit ones), else 64-bit. The pairs of a second tensor (k beside q: its
// own head count H2) follow the first's `split` pairs in the same launch; split is a multiple of
// kChunk wherever chunks run (half is), so no chunk straddles the two.
template <typename A, typename Index>
struct RopeRotate {
  A* x;
  A* x2;        // null: none
  Index split;  // x's pairs, B·T·H·half
  const float* cos_table;
  const float* sin_table;
  int64_t T, H, H2, half, hd;  // half: the rotated elements' half; hd: a head's elements
  int64_t step, partner;       // pair i: elements i·step and i·step + partner (RopeSpec's)
  float sin_sign;
  const int32_t* doc_start;  // null: position t
  template <typename At>
  __device__ void operator()(At at) const {
    auto first = static_cast<Index>(at.first);
    A* base = x;
    Index heads = static_cast<Index>(H);
    if (first >= split) first -= split, base = x2, heads = static_cast<Index>(H2);
    const auto i = static_cast<int64_t>(first % static_cast<Index>(half));
    const Index head = first / static_cast<Index>(half);  // (b·T + t)·heads + h
    const Index row = head / heads;                       // b·T + t
    const int64_t t = static_cast<int64_t>(row % static_cast<Index>(T)) -
                      (doc_start ? doc_start[row] : 0);  // the position
    const auto bth = static_cast<int64_t>(head);
    const At here{0};
    A* x1 = base + bth * hd + i * step;  // chunks only with step 1: consecutive pairs
    float a[At::kCount], b[At::kCount], c[At::kCount], s[At::kCount];
    here.load(x1, a);
    here.load(x1 + partner, b);
    here.load(cos_table + t * half + i, c);
    here.load(sin_table + t * half + i, s);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j) {
      const float sj = sin_sign * s[j];
      const float a2 = __fsub_rn(__fmul_rn(a[j], c[j]), __fmul_rn(b[j], sj));
      b[j] = __fadd_rn(__fmul_rn(b[j], c[j]), __fmul_rn(a[j], sj));
      a[j] = a2;
    }
    here.store(x1, a);
    here.store(x1 + partner, b);
  }
};

}  // namespace

void launch_rmsnorm_forward(TensorView y, float* rstd, ConstTensorView x, ConstTensorView g,
                            int64_t M, int64_t D, float eps, float weight_offset,
                            cudaStream_t stream) {
  if (M == 0) return;
  const bool chunked = chunked_rows(D, {y.data, x.data, g.data});
  with_storage(shared_storage("rmsnorm_forward", {y, x}), "rmsnorm_forward", [&](auto x_tag) {
    using A = std::remove_pointer_t<decltype(x_tag)>;
    with_storage(g.dtype, "rmsnorm_forward g", [&](auto g_tag) {
      using W = std::remove_pointer_t<decltype(g_tag)>;
      rmsnorm_forward_kernel<<<static_cast<unsigned>(M), kRowThreads, 0, stream>>>(
          typed<A>(y), rstd, typed<A>(x), typed<W>(g), D, eps, weight_offset, chunked);
    });
  });
  ZT_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

void launch_rmsnorm_backward_dx(TensorView dx, ConstTensorView dy, ConstTensorView x,
                                ConstTensorView g, const float* rstd, int64_t M, int64_t D,
                                float weight_offset, cudaStream_t stream) {
  if (M == 0) return;
  const DType storage = shared_storage("rmsnorm_backward", {dx, dy, x});
  const bool chunked = chunked_rows(D, {dx.data, dy.data, x.data, g.data});
  with_storage(storage, "rmsnorm_backward", [&](auto x_tag) {
    using A = std::remove_pointer_t<decltype(x_tag)>;
    with_storage(g.dtype, "rmsnorm_backward g", [&](auto g_tag) {
      using W = std::remove_pointer_t<decltype(g_tag)>;
      rmsnorm_backward_dx_kernel<<<static_cast<unsigned>(M), kRowThreads, 0, stream>>>(
          typed<A>(dx), typed<A>(dy), typed<A>(x), typed<W>(g), rstd, D, weight_offset, chunked);
    });
  });
  ZT_CUDA_CHECK_LAUNCH("rmsnorm_backward_dx_kernel");
}

void launch_rmsnorm_backward_dg(float* dg, double* partials, ConstTensorView dy, ConstTensorView x,
                                const float* rstd, int64_t M, int64_t D, int64_t rows_per_chunk,
                                bool assign, cudaStream_t stream) {
  with_storage(shared_storage("rmsnorm_backward", {dy, x}), "rmsnorm_backward", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    launch_column_sums(dg, partials, RmsnormDgTerm<A>{typed<A>(dy), typed<A>(x), rstd, D}, M, D,
                       rows_per_chunk, stream, assign);
  });
}

void launch_rope(TensorView x, int64_t H, TensorView x2, int64_t H2, int64_t B, int64_t T,
                 int64_t hd, const RopeRotation& rotation, const int32_t* doc_start,
                 cudaStream_t stream) {
  const int64_t half = rotation.rotated / 2, split = B * T * H * half;
  const int64_t pairs = split + (x2 ? B * T * H2 * half : 0);
  const bool chunkable = rotation.step == 1 && half % kChunk == 0 && hd % kChunk == 0;
  with_storage(shared_storage("rope", {x, x2}), "rope x", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    const auto launch = [&](auto index) {
      using Index = decltype(index);
      const RopeRotate<A, Index> rotate{typed<A>(x),
                                        typed<A>(x2),
                                        static_cast<Index>(split),
                                        rotation.cos_table,
                                        rotation.sin_table,
                                        T,
                                        H,
                                        H2,
                                        half,
                                        hd,
                                        rotation.step,
                                        rotation.partner,
                                        rotation.sin_sign,
                                        doc_start};
      launch_elementwise("rope", rotate, pairs,
                         {x.data, x2.data, rotation.cos_table, rotation.sin_table}, stream,
                         chunkable);
    };
    if (pairs <= static_cast<int64_t>(UINT32_MAX))
      launch(uint32_t{});
    else
      launch(uint64_t{});
  });
}

}  // namespace zt::cuda

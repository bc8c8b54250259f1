// CUDA backend: the gated MLP activations (SwiGLU, GeGLU), token embedding, fused softmax
// cross-entropy and the elementwise helpers, forward and backward side by side. Activations in any
// storage type (cuda_storage.cuh): read widened, computed in fp32, each output rounded once. The
// elementwise ops run in 16-byte accesses where their tensors are aligned (cuda_elementwise.cuh).
#include <cmath>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_column_sum.cuh"
#include "backend/cuda/cuda_elementwise.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_storage.cuh"
#include "backend/dropout_hash.h"
#include "backend/glu_math.h"
#include "util/cuda/cuda_check.h"
#include "util/error.h"
#include "util/ignored_target.h"

namespace zt::cuda {
namespace {

// ---- gated MLP activations (elementwise bodies: cuda_elementwise.cuh) ----
// backend/glu_math.h's activations with CUDA's exp and tanh.
struct CudaMath {
  ZT_HOST_DEVICE static float exp(float x) { return expf(x); }
  ZT_HOST_DEVICE static float tanh(float x) { return tanhf(x); }
};
using Silu = zt::Silu<CudaMath>;
using GeluTanh = zt::GeluTanh<CudaMath>;

// Forward: h = act(a)·u.
template <typename A, typename Act>
struct GluForward {
  A* h;
  const A* gate;
  const A* up;
  template <typename At>
  __device__ void operator()(At at) const {
    float a[At::kCount], u[At::kCount], out[At::kCount];
    at.load(gate, a);
    at.load(up, u);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j) out[j] = Act::value(a[j]) * u[j];
    at.store(h, out);
  }
};

// Backward: dgate and dup from dh (Act::grads).
template <typename A, typename Act>
struct GluBackward {
  A* dgate;
  A* dup;
  const A* dh;
  const A* gate;
  const A* up;
  template <typename At>
  __device__ void operator()(At at) const {
    float a[At::kCount], u[At::kCount], g[At::kCount], dg[At::kCount], du[At::kCount];
    at.load(gate, a);
    at.load(up, u);
    at.load(dh, g);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j) Act::grads(a[j], g[j], u[j], dg[j], du[j]);
    at.store(dgate, dg);
    at.store(dup, du);
  }
};

// Calls fn with a value of the activation's type (Silu or GeluTanh).
template <typename Fn>
void with_activation(GluActivation act, Fn&& fn) {
  if (act == GluActivation::kSilu)
    fn(Silu{});
  else
    fn(GeluTanh{});
}

// ---- token embedding ----
// Forward, one block per token: x[i] = table[tokens[i]]; a negative id gives a NaN row.
template <typename A, typename W>
__global__ void embedding_forward_kernel(A* x, const int32_t* tokens, const W* table, int64_t D) {
  const int64_t i = blockIdx.x;
  const int32_t id = tokens[i];
  A* xr = x + i * D;
  if (id < 0) {
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) store(xr, d, NAN);
    return;
  }
  const W* row = table + static_cast<int64_t>(id) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) store(xr, d, load(row, d));
}

// Backward: dtable[v] += Σ_{i: tokens[i]=v} dx[i], deterministic without atomics or a sort.
// Block i handles token position i. It first looks for an earlier position with the same id; if
// there is one, that position's block owns the id and block i exits. The owner (the first
// occurrence) walks positions i..n−1 in tiles of blockDim, compacts the matching positions of a
// tile in order (warp ballots), and adds their dx rows into per-thread register sums, thread t
// holding columns t, t + blockDim, ... (at most kEmbeddingColumnsPerThread of them). After the
// last tile each sum is added into dtable[v] once. Every element is therefore the sum over
// positions in position order, from zero, added once — the CPU backend's order, so the results
// are bitwise equal. Cost O(n · distinct ids) id comparisons (L2-resident): the backend runs it
// only where the sorted kernel's scratch does not fit (cuda_embedding_sort.cu).
constexpr int kEmbeddingColumnsPerThread = 64;  // D ≤ 64·kRowThreads = 16384

template <typename A>
__global__ void embedding_backward_kernel(float* dtable, const A* dx, const int32_t* tokens,
                                          int64_t n, int64_t D) {
  __shared__ int64_t matches[kRowThreads];
  __shared__ int warp_counts[kRowThreads / kWarpSize];
  const int64_t i = blockIdx.x;
  const int32_t id = tokens[i];
  if (id < 0) return;
  for (int64_t j0 = 0; j0 < i; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x;
    if (__syncthreads_or(j < i && tokens[j] == id)) return;  // uniform across the block
  }
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const unsigned lanes_below = (1u << lane) - 1u;
  float sum[kEmbeddingColumnsPerThread];
#pragma unroll
  for (int c = 0; c < kEmbeddingColumnsPerThread; ++c) sum[c] = 0.0f;
  for (int64_t j0 = i; j0 < n; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x;
    const bool hit = j < n && tokens[j] == id;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int offset = __popc(ballot & lanes_below);
    int total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x) / kWarpSize; ++w) {
      if (w < warp) offset += warp_counts[w];
      total += warp_counts[w];
    }
    if (hit) matches[offset] = j;
    __syncthreads();
    for (int k = 0; k < total; ++k) {
      const A* src = dx + matches[k] * D;
#pragma unroll
      for (int c = 0; c < kEmbeddingColumnsPerThread; ++c) {
        const int64_t d = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
        if (d < D) sum[c] += load(src, d);
      }
    }
    __syncthreads();  // matches and warp_counts are rewritten by the next tile
  }
  float* row = dtable + static_cast<int64_t>(id) * D;
#pragma unroll
  for (int c = 0; c < kEmbeddingColumnsPerThread; ++c) {
    const int64_t d = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
    if (d < D) row[d] += sum[c];
  }
}

// ---- elementwise helpers ----
// ---- linear-layer bias ----
// Forward: y[m, n] += b[n], read and added in fp32, rounded once.
template <typename A, typename W>
__global__ void bias_forward_kernel(A* y, const W* b, int64_t n_total, int64_t N) {
  for (int64_t i = global_thread(); i < n_total; i += grid_threads())
    store(y, i, load(y, i) + load(b, i % N));
}

// Backward's term: db[n] += Σ_m dy[m, n] (summed over rows by cuda_column_sum.cuh).
template <typename A>
struct BiasGradTerm {
  const A* dy;
  int64_t N;
  __device__ double operator()(int64_t m, int64_t n) const {
    return static_cast<double>(load(dy, m * N + n));
  }
};

// y += x, read and added in fp32, rounded once.
template <typename A>
struct AddInPlace {
  A* y;
  const A* x;
  template <typename At>
  __device__ void operator()(At at) const {
    float a[At::kCount], b[At::kCount];
    at.load(y, a);
    at.load(x, b);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j) a[j] += b[j];
    at.store(y, a);
  }
};

// y = op(y) elementwise, read widened and rounded once in y's storage.
template <typename A, typename Op>
struct MapInPlace {
  A* y;
  Op op;
  template <typename At>
  __device__ void operator()(At at) const {
    float a[At::kCount];
    at.load(y, a);
#pragma unroll
    for (int j = 0; j < At::kCount; ++j) a[j] = op(a[j]);
    at.store(y, a);
  }
};
// scale_inplace: y·s.
struct ScaleBy {
  float s;
  __device__ float operator()(float y) const { return y * s; }
};
// softcap_inplace: c·tanh(y/c).
struct SoftCap {
  float c;
  __device__ float operator()(float y) const { return c * tanhf(y / c); }
};

// out = in in another storage type: load() widens exactly, store() rounds once (to nearest even;
// fp16 to ±inf past 65504): fp32 → bf16/fp16 and back.
template <typename In, typename Out>
struct Convert {
  Out* out;
  const In* in;
  template <typename At>
  __device__ void operator()(At at) const {
    float v[At::kCount];
    at.load(in, v);
    at.store(out, v);
  }
};

template <typename In, typename Out>
void launch_convert(const char* name, Out* out, const In* in, int64_t n, cudaStream_t stream) {
  launch_elementwise(name, Convert<In, Out>{out, in}, n, {out, in}, stream);
}

}  // namespace

void launch_glu_forward(TensorView h, ConstTensorView gate, ConstTensorView up, int64_t n,
                        GluActivation act, cudaStream_t stream) {
  if (n == 0) return;
  with_storage(shared_storage("glu_forward", {h, gate, up}), "glu_forward", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    with_activation(act, [&](auto activation) {
      using Act = decltype(activation);
      launch_elementwise("glu_forward",
                         GluForward<A, Act>{typed<A>(h), typed<A>(gate), typed<A>(up)}, n,
                         {h.data, gate.data, up.data}, stream);
    });
  });
}

void launch_glu_backward(TensorView dgate, TensorView dup, ConstTensorView dh, ConstTensorView gate,
                         ConstTensorView up, int64_t n, GluActivation act, cudaStream_t stream) {
  if (n == 0) return;
  const DType storage = shared_storage("glu_backward", {dgate, dup, dh, gate, up});
  with_storage(storage, "glu_backward", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    with_activation(act, [&](auto activation) {
      using Act = decltype(activation);
      launch_elementwise("glu_backward",
                         GluBackward<A, Act>{typed<A>(dgate), typed<A>(dup), typed<A>(dh),
                                             typed<A>(gate), typed<A>(up)},
                         n, {dgate.data, dup.data, dh.data, gate.data, up.data}, stream);
    });
  });
}

void launch_embedding_forward(TensorView x, const int32_t* tokens, ConstTensorView table, int64_t n,
                              int64_t D, cudaStream_t stream) {
  if (n == 0 || D == 0) return;
  with_storage(x.dtype, "embedding_forward x", [&](auto x_tag) {
    using A = std::remove_pointer_t<decltype(x_tag)>;
    with_storage(table.dtype, "embedding_forward table", [&](auto table_tag) {
      using W = std::remove_pointer_t<decltype(table_tag)>;
      embedding_forward_kernel<<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(
          typed<A>(x), tokens, typed<W>(table), D);
    });
  });
  ZT_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

void launch_embedding_backward(float* dtable, ConstTensorView dx, const int32_t* tokens, int64_t n,
                               int64_t D, cudaStream_t stream) {
  if (n == 0 || D == 0) return;
  ZT_CHECK(D <= static_cast<int64_t>(kEmbeddingColumnsPerThread) * kRowThreads,
           "embedding backward: hidden size " + std::to_string(D) + " is above the CUDA kernel's " +
               std::to_string(kEmbeddingColumnsPerThread * kRowThreads));
  with_storage(dx.dtype, "embedding_backward dx", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    embedding_backward_kernel<<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(
        dtable, typed<A>(dx), tokens, n, D);
  });
  ZT_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

void launch_add(TensorView y, ConstTensorView x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_storage(shared_storage("add_inplace", {y, x}), "add_inplace", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    launch_elementwise("add_inplace", AddInPlace<A>{typed<A>(y), typed<A>(x)}, n, {y.data, x.data},
                       stream);
  });
}

void launch_bias_forward(TensorView y, ConstTensorView b, int64_t M, int64_t N,
                         cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  with_storage(y.dtype, "bias_forward y", [&](auto y_tag) {
    using A = std::remove_pointer_t<decltype(y_tag)>;
    with_storage(b.dtype, "bias_forward b", [&](auto b_tag) {
      using W = std::remove_pointer_t<decltype(b_tag)>;
      bias_forward_kernel<<<elementwise_blocks(M * N), kElementwiseThreads, 0, stream>>>(
          typed<A>(y), typed<W>(b), M * N, N);
    });
  });
  ZT_CUDA_CHECK_LAUNCH("bias_forward_kernel");
}

void launch_bias_backward(float* db, double* partials, ConstTensorView dy, int64_t M, int64_t N,
                          int64_t rows_per_chunk, cudaStream_t stream) {
  with_storage(dy.dtype, "bias_backward dy", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    launch_column_sums(db, partials, BiasGradTerm<A>{typed<A>(dy), N}, M, N, rows_per_chunk,
                       stream);
  });
}

// y = op(y) in place, whatever y's storage; `what` names the op in errors and launches.
template <typename Op>
void launch_map_in_place(TensorView y, Op op, int64_t n, const char* what, cudaStream_t stream) {
  if (n == 0) return;
  with_storage(y.dtype, what, [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    launch_elementwise(what, MapInPlace<A, Op>{typed<A>(y), op}, n, {y.data}, stream);
  });
}

void launch_softcap(TensorView y, float c, int64_t n, cudaStream_t stream) {
  launch_map_in_place(y, SoftCap{c}, n, "softcap_inplace", stream);
}

void launch_scale(TensorView y, float s, int64_t n, cudaStream_t stream) {
  launch_map_in_place(y, ScaleBy{s}, n, "scale_inplace", stream);
}

template <typename A>
__global__ void dropout_kernel(A* y, const A* x, int64_t n, uint64_t first_element, float p,
                               float scale, uint64_t stream_key) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const bool keep = dropout_uniform(stream_key, first_element + static_cast<uint64_t>(i)) >= p;
    store(y, i, keep ? load(x, i) * scale : 0.0f);
  }
}

void launch_dropout(TensorView y, ConstTensorView x, int64_t n, uint64_t first_element, float p,
                    uint64_t stream_key, cudaStream_t stream) {
  if (n == 0) return;
  with_storage(shared_storage("dropout_forward", {y, x}), "dropout_forward", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    dropout_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
        typed<A>(y), typed<A>(x), n, first_element, p, 1.0f / (1.0f - p), stream_key);
  });
  ZT_CUDA_CHECK_LAUNCH("dropout_kernel");
}

void launch_to_bf16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream) {
  launch_convert<float, Bf16Bits>("to_bf16", out, in, n, stream);
}

void launch_from_bf16(float* out, const uint16_t* in, int64_t n, cudaStream_t stream) {
  launch_convert<Bf16Bits, float>("from_bf16", out, in, n, stream);
}

void launch_to_fp16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream) {
  launch_convert<float, Fp16Bits>("to_fp16", reinterpret_cast<Fp16Bits*>(out), in, n, stream);
}

void launch_from_fp16(float* out, const uint16_t* in, int64_t n, cudaStream_t stream) {
  launch_convert<Fp16Bits, float>("from_fp16", out, reinterpret_cast<const Fp16Bits*>(in), n,
                                  stream);
}

}  // namespace zt::cuda

// DoRA's three ops on the device (backend/backend.h; the math is model/llama_lora.cpp's), each
// element as the CPU backend forms it (cpu_dora.cpp), sums in double in a fixed order of their own
// (not the CPU's: equal within fp32 rounding):
//   norms     n[o] = ‖W[o,:] + s·(B[o,:]·A)‖₂          one block per row
//   scale     y (+)= (m/n + offset) ⊙ x, by column      elementwise
//   gradient  dm[o] += Σ_t dy[t,o]·z[t,o] / n[o]        column sums, then one division
#include <type_traits>

#include "backend/cuda/cuda_column_sum.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_storage.cuh"
#include "backend/cuda/cuda_storage.h"

namespace zt::cuda {

namespace {

// Block n: thread t takes the elements k = t, t + blockDim, ... of row n of W + s·(B·A), each
// B·A term summed in fp32 in rank order, its square added in double; block_sum in a fixed order;
// the norm rounded to Norm's type (backend.h's norm_type) and back.
template <typename W, typename L, typename Norm>
__global__ void dora_weight_norms_kernel(float* norms, const W* w, const L* b, const L* a, float s,
                                         int64_t r, int64_t K) {
  const int64_t n = blockIdx.x;
  double squares = 0.0;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    float delta = 0.0f;
    for (int64_t j = 0; j < r; ++j) delta += load(b, n * r + j) * load(a, j * K + k);
    const float v = load(w, n * K + k) + s * delta;
    squares += static_cast<double>(v) * v;
  }
  squares = block_sum(squares);
  if (threadIdx.x == 0) {
    Norm rounded[1];
    store(rounded, 0, static_cast<float>(sqrt(squares)));
    norms[n] = load(rounded, 0);
  }
}

template <typename A, typename L>
__global__ void dora_scale_columns_kernel(A* y, const A* x, const L* magnitude, const float* norms,
                                          float offset, int64_t total, int64_t N, bool accumulate) {
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t n = e % N;
    const float f = load(magnitude, n) / norms[n] + offset;
    const float v = f * load(x, e);
    store(y, e, accumulate ? load(y, e) + v : v);
  }
}

// Column-sum term: dy·z in double.
template <typename A>
struct DoraMagnitudeTerm {
  const A* dy;
  const A* z;
  int64_t N;
  __device__ double operator()(int64_t m, int64_t n) const {
    return static_cast<double>(load(dy, m * N + n)) * load(z, m * N + n);
  }
};

__global__ void dora_divide_add_kernel(float* dm, const float* sums, const float* norms,
                                       int64_t N) {
  const int64_t n = global_thread();
  if (n < N) dm[n] += sums[n] / norms[n];
}

}  // namespace

void launch_dora_weight_norms(float* norms, ConstTensorView w, ConstTensorView b, ConstTensorView a,
                              float s, int64_t N, int64_t r, int64_t K, DType norm_type,
                              cudaStream_t stream) {
  if (N == 0) return;
  ZT_CHECK(a.dtype == b.dtype, "dora_weight_norms: A and B are stored in different types");
  with_storage(w.dtype, "dora_weight_norms w", [&](auto w_tag) {
    using W = std::remove_pointer_t<decltype(w_tag)>;
    with_storage(b.dtype, "dora_weight_norms b", [&](auto l_tag) {
      using L = std::remove_pointer_t<decltype(l_tag)>;
      with_storage(norm_type, "dora_weight_norms norm_type", [&](auto n_tag) {
        using Norm = std::remove_pointer_t<decltype(n_tag)>;
        dora_weight_norms_kernel<W, L, Norm><<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
            norms, typed<W>(w), typed<L>(b), typed<L>(a), s, r, K);
      });
    });
  });
  ZT_CUDA_CHECK_LAUNCH("dora_weight_norms_kernel");
}

void launch_dora_scale_columns(TensorView y, ConstTensorView x, ConstTensorView magnitude,
                               const float* norms, float offset, int64_t M, int64_t N,
                               bool accumulate, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  with_storage(y.dtype, "dora_scale_columns y", [&](auto a_tag) {
    using A = std::remove_pointer_t<decltype(a_tag)>;
    ZT_CHECK(x.dtype == y.dtype, "dora_scale_columns: x and y are stored in different types");
    with_storage(magnitude.dtype, "dora_scale_columns magnitude", [&](auto l_tag) {
      using L = std::remove_pointer_t<decltype(l_tag)>;
      dora_scale_columns_kernel<<<elementwise_blocks(M * N), kElementwiseThreads, 0, stream>>>(
          typed<A>(y), typed<A>(x), typed<L>(magnitude), norms, offset, M * N, N, accumulate);
    });
  });
  ZT_CUDA_CHECK_LAUNCH("dora_scale_columns_kernel");
}

void launch_dora_magnitude_grad(float* dm, float* sums, double* partials, ConstTensorView dy,
                                ConstTensorView z, const float* norms, int64_t M, int64_t N,
                                int64_t rows_per_chunk, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  ZT_CUDA_CHECK(cudaMemsetAsync(sums, 0, static_cast<size_t>(N) * sizeof(float), stream));
  with_storage(dy.dtype, "dora_magnitude_grad dy", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    ZT_CHECK(z.dtype == dy.dtype, "dora_magnitude_grad: dy and z are stored in different types");
    launch_column_sums(sums, partials, DoraMagnitudeTerm<A>{typed<A>(dy), typed<A>(z), N}, M, N,
                       rows_per_chunk, stream);
  });
  dora_divide_add_kernel<<<elementwise_blocks(N), kElementwiseThreads, 0, stream>>>(dm, sums, norms,
                                                                                    N);
  ZT_CUDA_CHECK_LAUNCH("dora_divide_add_kernel");
}

}  // namespace zt::cuda

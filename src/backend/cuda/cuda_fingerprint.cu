// CUDA backend: the fingerprint of a GEMM's output (backend/gemm_tuning.h), which
// --gemm-algorithms timed compares between candidate algorithms.
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/gemm_tuning.h"
#include "util/cuda/cuda_check.h"

namespace zt::cuda {
namespace {

// out[0] += Σ gemm_fingerprint_term(e, bits of element e) over the row-major [batch, rows, cols]
// elements, out[1] += those gemm_element_changed holds for (against `baseline` where given, C in
// the same layout), out[2] += the ones that are not finite:
// per-thread sums, block trees, one atomicAdd each per block. Addition modulo 2^64 is associative
// and commutative, so the order of the blocks does not change the result.
template <typename Bits>
__global__ void gemm_fingerprint_kernel(unsigned long long* out, const Bits* data,
                                        const Bits* baseline, int64_t rows, int64_t cols,
                                        int64_t ld, int64_t stride, int64_t n,
                                        GemmElementMasks masks) {
  unsigned long long hash = 0, finite_changed = 0, non_finite = 0;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t b = e / (rows * cols);
    const int64_t r = (e / cols) % rows;
    const int64_t c = e % cols;
    const int64_t index = b * stride + r * ld + c;
    const auto bits = static_cast<uint32_t>(data[index]);
    const uint32_t before = baseline ? static_cast<uint32_t>(baseline[index]) : 0u;
    hash += gemm_fingerprint_term(static_cast<uint64_t>(e), bits);
    finite_changed += gemm_element_changed(bits, baseline ? &before : nullptr, masks);
    non_finite += (bits & masks.exponent) == masks.exponent;
  }
  const unsigned long long sums[3] = {block_sum(hash), block_sum(finite_changed),
                                      block_sum(non_finite)};
  if (threadIdx.x == 0)
    for (int i = 0; i < 3; ++i) atomicAdd(&out[i], sums[i]);
}

}  // namespace

void launch_fingerprint(unsigned long long* out, const void* data, const void* baseline, DType type,
                        int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                        cudaStream_t stream) {
  const int64_t n = rows * cols * batch;
  if (n == 0) return;
  const unsigned blocks = elementwise_blocks(n);
  const GemmElementMasks masks = gemm_element_masks(type);
  if (dtype_size(type) == 4) {
    gemm_fingerprint_kernel<<<blocks, kElementwiseThreads, 0, stream>>>(
        out, static_cast<const uint32_t*>(data), static_cast<const uint32_t*>(baseline), rows, cols,
        ld, stride, n, masks);
  } else {
    gemm_fingerprint_kernel<<<blocks, kElementwiseThreads, 0, stream>>>(
        out, static_cast<const uint16_t*>(data), static_cast<const uint16_t*>(baseline), rows, cols,
        ld, stride, n, masks);
  }
  ZT_CUDA_CHECK_LAUNCH("gemm_fingerprint_kernel");
}

}  // namespace zt::cuda

#include "comm/cuda/nccl_rank_tree_add.h"

#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt {
namespace {

constexpr int kThreads = 256;

// out += in, one element per thread of a grid-stride loop (a plain IEEE add: no contraction).
template <typename T>
__global__ void rank_tree_add_kernel(T* out, const T* in, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride)
    out[i] = out[i] + in[i];
}

}  // namespace

void launch_rank_tree_add(void* out, const void* in, size_t count, DType dtype,
                          cudaStream_t stream) {
  if (count == 0) return;
  const size_t wanted = (count + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65535 ? wanted : 65535);
  if (dtype == DType::kFloat64) {
    rank_tree_add_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<double*>(out),
                                                          static_cast<const double*>(in), count);
  } else {
    ZT_CHECK(dtype == DType::kFloat32, "rank-tree add: float32 or float64 only");
    rank_tree_add_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(out),
                                                          static_cast<const float*>(in), count);
  }
  ZT_CUDA_CHECK_LAUNCH("rank_tree_add_kernel");
}

}  // namespace zt

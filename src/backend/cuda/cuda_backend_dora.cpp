// The CUDA backend's DoRA ops (backend/backend.h): cuda_dora.cu's kernels on the backend's stream.
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device_arena.h"
#include "backend/cuda/cuda_kernels.h"

namespace zt::cuda {

void CudaBackend::dora_weight_norms(float* norms, ConstTensorView w, ConstTensorView b,
                                    ConstTensorView a, float s, int64_t N, int64_t r, int64_t K,
                                    DType norm_type) {
  launch_dora_weight_norms(norms, w, b, a, s, N, r, K, norm_type,
                           static_cast<cudaStream_t>(stream_handle()));
}

void CudaBackend::dora_scale_columns(TensorView y, ConstTensorView x, ConstTensorView magnitude,
                                     const float* norms, float offset, int64_t M, int64_t N,
                                     bool accumulate) {
  launch_dora_scale_columns(y, x, magnitude, norms, offset, M, N, accumulate,
                            static_cast<cudaStream_t>(stream_handle()));
}

void CudaBackend::dora_magnitude_grad(float* dm, ConstTensorView dy, ConstTensorView z,
                                      const float* norms, int64_t M, int64_t N) {
  if (M == 0 || N == 0) return;
  const ArenaScope scope(scratch_arena());
  float* sums =
      scratch_arena().allocate<float>(ScratchCategory::kReduction, static_cast<size_t>(N));
  const ColumnSumScratch scratch = column_sum_scratch(M, N);
  launch_dora_magnitude_grad(dm, sums, scratch.partials, dy, z, norms, M, N, scratch.rows_per_chunk,
                             static_cast<cudaStream_t>(stream_handle()));
}

}  // namespace zt::cuda

#include "backend/cuda/cuda_attention_staging.h"

#include <string>

#include "backend/cuda/cuda_kernels.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

// dst[n] (type `to`) = src[n] (type `from`), for float32 ↔ bfloat16 and float32 ↔ float16.
void convert(void* dst, DType to, const void* src, DType from, int64_t n, cudaStream_t stream) {
  if (from == DType::kFloat32 && to == DType::kBf16) {
    launch_to_bf16(static_cast<uint16_t*>(dst), static_cast<const float*>(src), n, stream);
  } else if (from == DType::kBf16 && to == DType::kFloat32) {
    launch_from_bf16(static_cast<float*>(dst), static_cast<const uint16_t*>(src), n, stream);
  } else if (from == DType::kFloat32 && to == DType::kFloat16) {
    launch_to_fp16(static_cast<uint16_t*>(dst), static_cast<const float*>(src), n, stream);
  } else if (from == DType::kFloat16 && to == DType::kFloat32) {
    launch_from_fp16(static_cast<float*>(dst), static_cast<const uint16_t*>(src), n, stream);
  } else {
    throw Error(std::string("attention staging: cannot convert ") + dtype_name(from) + " to " +
                dtype_name(to));
  }
}

void* scratch_for(DeviceArena& arena, DType type, int64_t n) {
  return arena.allocate_bytes(ScratchCategory::kAttention,
                              static_cast<size_t>(n) * dtype_size(type));
}

}  // namespace

const void* staged_input(DeviceArena& arena, ConstTensorView src, DType compute, int64_t n,
                         cudaStream_t stream) {
  if (src.dtype == compute) return src.data;
  void* copy = scratch_for(arena, compute, n);
  convert(copy, compute, src.data, src.dtype, n, stream);
  return copy;
}

void* staged_output(DeviceArena& arena, TensorView dst, DType compute, int64_t n) {
  return dst.dtype == compute ? dst.data : scratch_for(arena, compute, n);
}

void commit_output(TensorView dst, const void* staged, DType compute, int64_t n,
                   cudaStream_t stream) {
  if (dst.dtype != compute) convert(dst.data, dst.dtype, staged, compute, n, stream);
}

}  // namespace zt::cuda

// Both attention paths compute in one element type (the GEMM path fp32, cuDNN's SDPA bf16) and
// take activations stored in either: a tensor already in the computing type is used where it is,
// another is converted into (or out of) the attention scratch. The bytes this takes are what
// attention_staging_bytes (backend/attention_choice.h) counts.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/cuda_device_arena.h"
#include "util/dtype.h"
#include "util/tensor_view.h"

namespace zt::cuda {

// What a kernel computing in `compute` (float32 or bfloat16) reads for src: src itself when it is
// stored in that type, else a copy converted into the attention scratch (rounded to nearest even
// when narrowing, exact when widening).
const void* staged_input(DeviceArena& arena, ConstTensorView src, DType compute, int64_t n,
                         cudaStream_t stream);

// Where such a kernel writes its result for dst: dst itself, or room in the attention scratch
// that commit_output converts into dst once the kernel has run.
void* staged_output(DeviceArena& arena, TensorView dst, DType compute, int64_t n);
void commit_output(TensorView dst, const void* staged, DType compute, int64_t n,
                   cudaStream_t stream);

}  // namespace zt::cuda

// Causal grouped-query attention on the GPU as GEMMs + row kernels (the "correct first" path;
// a fused flash-style kernel can replace it behind the same functions).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/attention_choice.h"
#include "backend/cuda/cuda_device_arena.h"
#include "backend/cuda/cuda_gemm.h"

namespace zt::cuda {

using zt::AttentionShape;  // backend/attention_choice.h

// Same contract as Backend::attention_forward / attention_backward (device pointers).
void attention_forward(LtGemm& gemm, DeviceArena& arena, cudaStream_t stream, float* out,
                       float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& shape);
void attention_backward(LtGemm& gemm, DeviceArena& arena, cudaStream_t stream, float* dq, float* dk,
                        float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse,
                        const AttentionShape& shape);

}  // namespace zt::cuda

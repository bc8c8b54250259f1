// Causal grouped-query attention on the GPU as GEMMs + row kernels (the "correct first" path;
// a fused flash-style kernel can replace it behind the same functions).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/attention_choice.h"
#include "backend/cuda/cuda_device_arena.h"
#include "backend/cuda/cuda_gemm.h"
#include "util/tensor_view.h"

namespace zt::cuda {

using zt::AttentionShape;  // backend/attention_choice.h

// Same contract as Backend::attention_forward / attention_backward (device memory; the views of
// one call share a storage type). The GEMMs and row kernels compute in fp32: bf16 tensors are
// widened into fp32 copies at the start of the attention scratch (attention_staging_bytes) and
// the outputs rounded once into their bf16 storage at the end. doc_start: the document masks
// ([B, T], device memory) or null.
void attention_forward(LtGemm& gemm, DeviceArena& arena, cudaStream_t stream, TensorView out,
                       float* lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                       const AttentionShape& shape, const int32_t* doc_start = nullptr);
void attention_backward(LtGemm& gemm, DeviceArena& arena, cudaStream_t stream, TensorView dq,
                        TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                        ConstTensorView k, ConstTensorView v, ConstTensorView out, const float* lse,
                        const AttentionShape& shape, const int32_t* doc_start = nullptr);

}  // namespace zt::cuda

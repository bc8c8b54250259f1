// Deterministic parameter initialisation. Each tensor's values depend only on (seed, tensor
// name, element index), so a tensor can be produced alone, in any order, or in pieces (a rank's
// shard) and always equals the full initialisation. normal(0, 0.02) for matrices, output
// projections (o_proj, down_proj) scaled by 1/sqrt(2L), norm scales at 1 (Gemma's weights at 0),
// biases at 0, the padding token's embedding row at 0; LoRA's A Kaiming-uniform and B zero
// (model/lora.h).
#pragma once
#include <cstdint>

#include "model/config.h"
#include "model/layout.h"

namespace zt {

// Writes elements [begin, begin+count) of `tensor` (flattened row-major) into out.
void init_tensor_range(const ModelConfig& config, const TensorInfo& tensor, uint64_t seed,
                       int64_t begin, int64_t count, float* out);

}  // namespace zt

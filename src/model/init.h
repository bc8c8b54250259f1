// Deterministic parameter initialisation. Each tensor's values depend only on (seed, tensor
// name, element index), so a tensor can be produced alone, in any order, or in pieces (a rank's
// shard) and always equals the full initialisation. normal(0, 0.02) for matrices, output
// projections (o_proj, down_proj) scaled by 1/sqrt(2L), norm scales at 1 (Gemma's weights at 0),
// biases at 0, the padding token's embedding row at 0; LoRA's A Kaiming-uniform and B zero
// (model/lora.h), DoRA's magnitude the base rows' norms (init_start_range).
#pragma once
#include <cstdint>
#include <functional>

#include "model/config.h"
#include "model/layout.h"

namespace zt {

// Writes elements [begin, begin+count) of `tensor` (flattened row-major) into out.
void init_tensor_range(const ModelConfig& config, const TensorInfo& tensor, uint64_t seed,
                       int64_t begin, int64_t count, float* out);

// Reads elements [begin, begin+count) of a tensor of the model (a source's, or its initialisation).
using TensorRangeReader =
    std::function<void(const TensorInfo& tensor, int64_t begin, int64_t count, float* out)>;

// The starting values of a tensor no checkpoint or adapter holds: init_tensor_range's, but for a
// DoRA magnitude (kLoraMagnitude), which starts as PEFT starts it with B zero: m[o] = ‖W[o,:]‖₂,
// each output row's norm of the adapted projection of `layout` (a fused adapter's parts in B's
// row order), W's values read by read_base (fp32, the squares summed in double).
void init_start_range(const ParamLayout& layout, const TensorInfo& tensor, uint64_t seed,
                      int64_t begin, int64_t count, const TensorRangeReader& read_base, float* out);

}  // namespace zt

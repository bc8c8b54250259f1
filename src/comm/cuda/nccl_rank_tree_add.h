// The one kernel the NCCL communicator launches itself: the elementwise sum of a rank-tree
// reduce-scatter step (comm/rank_tree_schedule.h), out[i] = out[i] + in[i], on the comm stream.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "util/dtype.h"

namespace zt {

// dtype: float32 or float64.
void launch_rank_tree_add(void* out, const void* in, size_t count, DType dtype,
                          cudaStream_t stream);

}  // namespace zt

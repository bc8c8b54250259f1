// The target id of a position whose loss does not count (an SFT prompt token, where the dataset's
// /loss_mask is 0): its per-token loss is 0 and its logits get no gradient, as PyTorch's
// cross_entropy with ignore_index. The loss of a step is the sum over counted targets divided by
// their number in the global batch (docs/ARCHITECTURE.md §3, "Token dataset").
#pragma once
#include <cstdint>

namespace zt {

constexpr int32_t kIgnoredTarget = -1;

}  // namespace zt

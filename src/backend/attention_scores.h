// How attention forms its scores before the softmax (backend.h's attention ops), and which keys a
// query sees:
//   s = scale·q·k,  then with a soft cap c (Gemma 2's attn_logit_softcapping)  s ← c·tanh(s/c)
// scale is 1/sqrt(head_dim) unless the family says otherwise (Gemma 2's query_pre_attn_scalar^−½).
// The cap bounds every score within (−c, c) and keeps the order of the scores; its derivative is
// 1 − tanh²(s/c) = 1 − (s_capped/c)², so the backward needs only the capped score.
// A sliding window of w tokens (Mistral's, Phi-3's, every other layer of Gemma 2) lets the query
// at position p see only the keys at positions p − w < j ≤ p: itself and the w − 1 before it, as
// transformers' eager and SDPA masks keep them (key j masked where j ≤ p − w).
#pragma once
#include <cmath>
#include <cstdint>

#include "util/splitmix64.h"  // ZT_HOST_DEVICE

namespace zt {

// The first key the query at `position` sees: the later of its document's first token
// (`document_start`, 0 without document masks) and, under a window w > 0, position − w + 1. One
// definition for the CPU attention and the CUDA row kernels.
ZT_HOST_DEVICE inline int64_t first_visible_key(int64_t position, int64_t document_start,
                                                int64_t window) {
  const int64_t in_window = window > 0 && position - window + 1 > 0 ? position - window + 1 : 0;
  return document_start > in_window ? document_start : in_window;
}

struct AttentionScores {
  float scale = 0.0f;    // 0: 1/sqrt(head_dim)
  float softcap = 0.0f;  // 0: none
  int64_t window = 0;    // 0: none (every earlier key)
  float scale_for(int64_t head_dim) const {
    return scale > 0.0f ? scale
                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  }
  bool operator==(const AttentionScores& o) const {
    return scale == o.scale && softcap == o.softcap && window == o.window;
  }
};

}  // namespace zt

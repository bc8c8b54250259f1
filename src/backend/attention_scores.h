// How attention forms its scores before the softmax (backend.h's attention ops):
//   s = scale·q·k,  then with a soft cap c (Gemma 2's attn_logit_softcapping)  s ← c·tanh(s/c)
// scale is 1/sqrt(head_dim) unless the family says otherwise (Gemma 2's query_pre_attn_scalar^−½).
// The cap bounds every score within (−c, c) and keeps the order of the scores; its derivative is
// 1 − tanh²(s/c) = 1 − (s_capped/c)², so the backward needs only the capped score.
#pragma once
#include <cmath>
#include <cstdint>

namespace zt {

struct AttentionScores {
  float scale = 0.0f;    // 0: 1/sqrt(head_dim)
  float softcap = 0.0f;  // 0: none
  float scale_for(int64_t head_dim) const {
    return scale > 0.0f ? scale
                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  }
  bool operator==(const AttentionScores& o) const {
    return scale == o.scale && softcap == o.softcap;
  }
};

}  // namespace zt

// A Gemma 3-shaped model config from a Gemma 2-shaped one, for the model tests: no soft caps,
// Gemma's q/k norms, a window of `window` keys on every layer but each second, and those windowed
// layers rotating with a base of their own (100: far from rope_theta, so that a layer rotated
// with the other base moves its results).
#pragma once
#include <cstdint>

#include "model/config.h"

namespace zt {

inline ModelConfig gemma3_from_gemma2_shape(ModelConfig c, int64_t window) {
  c.attn_logit_softcap = c.final_logit_softcap = 0.0f;
  c.qk_norm = true;
  c.sliding_window = window;
  c.sliding_window_pattern = 2;
  c.local_rope_theta = 100.0;
  c.validate();
  return c;
}

}  // namespace zt

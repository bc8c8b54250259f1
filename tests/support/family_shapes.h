// OLMo 2- and Granite-shaped model configs from a Llama-shaped one, for the model tests (the
// oracle tests check both families against transformers).
#pragma once

#include "model/config.h"

namespace zt {

// OLMo 2's layer: norms after the attention and the MLP and none before them, q/k norms over a
// token's whole projection.
inline ModelConfig olmo2_from_llama_shape(ModelConfig c) {
  c.sandwich_norms = c.qk_norm = c.qk_norm_spans_heads = true;
  c.pre_norms = false;
  c.validate();
  return c;
}

// Granite's four scalars, each far from 1 (Granite 3's embedding and residual ones; a score scale
// unlike 1/sqrt(head_dim); logits divided by 3, no power of two).
inline ModelConfig granite_from_llama_shape(ModelConfig c) {
  c.embedding_multiplier = 12.0, c.residual_multiplier = 0.22;  // Granite 3's
  c.attention_multiplier = 0.05, c.logits_scaling = 3.0;
  c.validate();
  return c;
}

}  // namespace zt

// OLMo 2-, OLMo 3- and Granite-shaped model configs from a Llama-shaped one, for the model tests
// (the oracle tests check both families against transformers).
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

// OLMo 3's layers on OLMo 2's: a window of `window` keys on every other layer (every fourth in
// AllenAI's models; every other here so that two layers hold one of each), those rotating with
// rope_theta unscaled, and yarn on the others (factor 4 of max_position_embeddings, cos and sin
// times OLMo 3's 1.2079..., the default of factor 8).
inline ModelConfig olmo3_from_llama_shape(ModelConfig c, int64_t window) {
  c = olmo2_from_llama_shape(c);
  c.sliding_window = window;
  c.sliding_window_pattern = 2;
  c.local_rope_theta = c.rope_theta;
  c.rope_scaling.type = RopeScaling::kYarn;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_positions = c.max_position_embeddings;
  c.rope_scaling.attention_factor = 1.2079441541679836;
  c.validate();
  return c;
}

// GLM-4's model: RoPE in adjacent pairs on half of each head, gate/up fused in the checkpoint,
// q/k/v biases, norms on the attention's and the MLP's outputs.
inline ModelConfig glm4_from_llama_shape(ModelConfig c) {
  c.interleaved_rope = c.fused_gate_up = true;
  c.partial_rotary_factor = 0.5;
  c.qkv_bias = true;
  c.sandwich_norms = true;
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

// A Llama decoder layer's tensors (its weights' views in the group's buffer, its activations'
// views) and its forward on either side of the attention, shared by the training model
// (model/llama.cpp) and the key/value-cache decoder (model/kv_cache_decoder.cpp): one definition
// of the layer's math, so both run the same ops in the same order. Between the two halves the
// caller rotates q and k (RoPE) and attends: over the micro-batch's window, or for new rows after
// cached ones. `adapt` adds a LoRA adapter's product to a projection's output, bias included,
// before what follows reads it (null: a model without adapters).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>

#include "backend/backend.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/lora.h"
#include "util/tensor_view.h"

namespace zt {

// One layer's saved activations in the arena (the statistics in fp32). With q/k norms (Qwen3)
// q_raw and k_raw hold the projections before the norm and rstd_q/rstd_k their per-head
// statistics; q and k are always what RoPE and attention see.
// LoRA: lora[t] = s·(x·Aᵀ) [M, r] of each adapted projection (null for the others).
// Gemma 2's sandwich norms: attn_out and mlp_out hold the o_proj and down_proj outputs before
// their norms, with their statistics (null otherwise).
struct LayerActivations {
  TensorView xn1, q, k, v, att, x2, xn2, gate, up, h;
  TensorView attn_out, mlp_out;
  float *rstd_attn_out = nullptr, *rstd_mlp_out = nullptr;
  std::array<TensorView, kLoraTargets> lora{};
  TensorView q_raw, k_raw;
  float *rstd1 = nullptr, *lse = nullptr, *rstd2 = nullptr;
  float *rstd_q = nullptr, *rstd_k = nullptr;
};

// A decoder layer's weights within its group's flat buffer (views at the tensors' offsets).
struct LayerWeights {
  ConstTensorView input_norm, wq, wk, wv, wo, post_norm, wgate, wup, wdown;
  ConstTensorView bq, bk, bv, bo, q_norm, k_norm;  // null when the family has none
  ConstTensorView attn_out_norm, mlp_out_norm;     // Gemma 2's sandwich norms, else null
};
LayerWeights layer_weights(const ParamLayout& layout, int layer, ConstTensorView group);

// What the attention's projections read: xn1 = rms(x)·g1, or x itself without pre-norms (OLMo 2).
inline ConstTensorView attention_input(const ModelConfig& config, const LayerActivations& A,
                                       ConstTensorView x) {
  return config.pre_norms ? ConstTensorView(A.xn1) : x;
}
// What the MLP's projections read: xn2 = rms(x2)·g2, or x2 itself without pre-norms (OLMo 2).
inline ConstTensorView mlp_input(const ModelConfig& config, const LayerActivations& A) {
  return config.pre_norms ? A.xn2 : A.x2;
}
// The rows a q/k norm normalises for a projection of `heads` heads: each head's head_dim values
// (Qwen3, Gemma 3: `heads` rows a token), or a token's whole projection (OLMo 2: one row of
// heads · head_dim).
struct QkNormRows {
  int64_t per_token, width;
};
inline QkNormRows qk_norm_rows(const ModelConfig& config, int64_t heads) {
  if (config.qk_norm_spans_heads) return {1, heads * config.head_dim()};
  return {heads, config.head_dim()};
}

// Adds target's adapter product to its outputs ys (a fused target's parts, in order).
using ProjectionAdapter =
    std::function<void(LoraTarget target, std::initializer_list<TensorView> ys, ConstTensorView x)>;

// xn1 = rms(x)·g1; q = xn1·Wqᵀ (+ bq), k, v likewise; with the family's q/k norm, each head's hd
// values of q and k normalised (rms_head). Writes A.xn1, A.rstd1, A.q, A.k, A.v (and A.q_raw,
// A.k_raw, A.rstd_q, A.rstd_k with q/k norms) for `rows` rows.
void decoder_layer_qkv(Backend& be, const ModelConfig& config, const LayerWeights& P,
                       const LayerActivations& A, ConstTensorView x, int64_t rows,
                       const ProjectionAdapter& adapt);

// From A.att: x2 = (x + att·Woᵀ) + bo; xn2 = rms(x2)·g2; h = act(xn2·Wgᵀ)·(xn2·Wuᵀ) (silu, or
// Gemma's tanh GELU with its (1 + g2)); out = x2 + h·Wdᵀ (each residual add in its projection's
// GEMM: matmul_forward_add, one rounding). Gemma 2's sandwich norms: attn_out = att·Woᵀ + bo,
// x2 = x + rms(attn_out)·(1 + g_ao); mlp_out = h·Wdᵀ, out = x2 + rms(mlp_out)·(1 + g_mo) (each
// norm's output rounded, then the add, as transformers rounds them); OLMo 2's the same without the
// norm before the MLP (xn2 is x2). Granite: x2 = x + m·(att·Woᵀ + bo), out = x2 + m·(h·Wdᵀ), m its
// residual_multiplier (the product rounded, then the add).
void decoder_layer_mlp(Backend& be, const ModelConfig& config, const LayerWeights& P,
                       const LayerActivations& A, ConstTensorView x, TensorView out, int64_t rows,
                       const ProjectionAdapter& adapt);

}  // namespace zt

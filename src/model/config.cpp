#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "util/bf16.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

namespace {

struct PresetRow {
  int64_t d, layers, heads, kv_heads, ffn, vocab;
};

const std::map<std::string, PresetRow>& presets() {
  static const std::map<std::string, PresetRow> table = {
      {"tiny", {64, 2, 4, 2, 192, 256}},        {"small", {256, 4, 8, 4, 688, 256}},
      {"125m", {768, 12, 12, 12, 2048, 32000}}, {"1b", {2048, 16, 16, 16, 5504, 32000}},
      {"6b", {4096, 28, 32, 32, 11008, 32000}}, {"7b", {4096, 32, 32, 32, 11008, 32000}},
  };
  return table;
}

}  // namespace

void ModelConfig::check_rope_scaling() const {
  if (rope_scaling.type == RopeScaling::kNone) return;
  const RopeScalingParams& r = rope_scaling;
  ZT_CHECK(r.factor >= 1 && std::isfinite(r.factor),
           "model config: rope_scaling.factor must be a finite number >= 1, got " +
               shortest_decimal(r.factor));
  if (r.type == RopeScaling::kLongrope) {
    const auto half = static_cast<size_t>(rotary_dims() / 2);
    ZT_CHECK(r.short_factor.size() == half && r.long_factor.size() == half,
             "model config: rope_scaling's short_factor and long_factor need one value per "
             "rotated pair, " +
                 std::to_string(half) + " (head_dim · partial_rotary_factor / 2), got " +
                 std::to_string(r.short_factor.size()) + " and " +
                 std::to_string(r.long_factor.size()));
    ZT_CHECK(r.original_max_positions > 1 && r.attention_factor >= 1 &&
                 std::isfinite(r.attention_factor),
             "model config: longrope needs original_max_position_embeddings above 1");
    ZT_CHECK(fused_projections,
             "model config: longrope rope scaling is implemented for Phi-3 only");
  }
  if (r.type == RopeScaling::kYarn) {
    ZT_CHECK(r.original_max_positions > 0,
             "model config: yarn needs original_max_position_embeddings above 0");
    ZT_CHECK(r.beta_fast > 0 && r.beta_slow > 0 && std::isfinite(r.beta_fast) &&
                 std::isfinite(r.beta_slow),
             "model config: yarn's beta_fast and beta_slow must be positive finite numbers");
    ZT_CHECK(r.attention_factor > 0 && std::isfinite(static_cast<float>(r.attention_factor)),
             "model config: yarn's attention_factor must be a positive number, finite in fp32");
    ZT_CHECK(!fused_projections && !is_gemma(),
             "model config: yarn rope scaling is implemented for Llama, Qwen2, Qwen3, SmolLM3, "
             "GLM-4, Ministral 3 and OLMo 3 (its full-attention layers)");
  }
  if (r.type == RopeScaling::kLlama3) {
    ZT_CHECK(r.low_freq_factor > 0 && r.low_freq_factor < r.high_freq_factor &&
                 std::isfinite(r.high_freq_factor),
             "model config: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got " +
                 shortest_decimal(r.low_freq_factor) + " and " +
                 shortest_decimal(r.high_freq_factor));
    ZT_CHECK(r.original_max_positions > 0,
             "model config: rope_scaling.original_max_position_embeddings must be positive");
  }
}

void check_layer_count(int64_t layers, const std::string& source) {
  ZT_CHECK(layers >= 1 && layers <= kMaxLayers,
           source + ": num_hidden_layers must be 1 to " + std::to_string(kMaxLayers) +
               " (the deepest published models have 126 layers), got " + std::to_string(layers));
}

void ModelConfig::validate() const {
  // Each size is a GEMM or index dimension: 32-bit for the BLAS and CUDA libraries.
  auto positive = [](int64_t v, const char* name) {
    ZT_CHECK(v > 0 && v <= std::numeric_limits<int32_t>::max(),
             std::string("model config: ") + name + " must be positive and below 2^31, got " +
                 std::to_string(v));
  };
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_hidden_layers");
  // The layout keeps a record per tensor of each layer before any file is read: a bound far
  // above any real model keeps a hostile config from costing gigabytes first.
  check_layer_count(num_layers, "model config");
  positive(num_heads, "num_attention_heads");
  positive(num_kv_heads, "num_key_value_heads");
  positive(vocab_size, "vocab_size");
  positive(max_position_embeddings, "max_position_embeddings");
  if (explicit_head_dim == 0) {
    ZT_CHECK(hidden_size % num_heads == 0,
             "model config: hidden_size must be a multiple of num_attention_heads (or head_dim "
             "given)");
  } else {
    positive(explicit_head_dim, "head_dim");
  }
  ZT_CHECK(num_heads % num_kv_heads == 0,
           "model config: num_attention_heads must be a multiple of num_key_value_heads");
  ZT_CHECK(head_dim() % 2 == 0, "model config: head_dim must be even for RoPE");
  ZT_CHECK(rms_norm_eps > 0 && std::isfinite(rms_norm_eps),
           "model config: rms_norm_eps must be a positive finite number");
  ZT_CHECK(rope_theta > 0 && std::isfinite(rope_theta),
           "model config: rope_theta must be a positive finite number");
  check_partial_rotary();
  check_layers_without_rope();
  check_gemma();
  check_gemma2();
  check_layer_pattern();
  check_olmo2();
  check_granite();
  check_glm();
  check_ministral3();
  check_sliding_window();
  check_rope_scaling();
  ZT_CHECK(padding_token >= -1 && padding_token < vocab_size,
           "model config: pad_token_id " + std::to_string(padding_token) +
               " is not a row of the embedding (vocab_size " + std::to_string(vocab_size) + ")");
  // Only the combinations a Hugging Face architecture computes (model_type()).
  ZT_CHECK(qkv_bias || !o_bias,
           "model config: an o_proj bias without q/k/v biases is not a "
           "Hugging Face architecture");
  ZT_CHECK(!qk_norm || qkv_bias == o_bias,
           "model config: q/k norms (Qwen3) take attention_bias for all four projections or none");
  ZT_CHECK(!(qkv_bias && !o_bias && !qk_norm && !is_glm()) || explicit_head_dim == 0 ||
               explicit_head_dim * num_heads == hidden_size,
           "model config: Qwen2 (q/k/v biases) computes head_dim as hidden_size / "
           "num_attention_heads; another head_dim is not implemented");
  ZT_CHECK(!fused_projections || (!qkv_bias && !qk_norm && explicit_head_dim == 0),
           "model config: Phi-3's fused projections with attention biases, q/k norms or a "
           "head_dim other than hidden_size / num_attention_heads are not a Hugging Face "
           "architecture");
  // Element offsets, byte counts and FLOP counts are int64/double products of these sizes; a
  // bound far above any real model (2^48 parameters, 2^40 per matrix) keeps them exact.
  const double d = static_cast<double>(hidden_size), ff = static_cast<double>(intermediate_size);
  const double v = static_cast<double>(vocab_size), layers = static_cast<double>(num_layers);
  const double qd = static_cast<double>(q_dim());
  const double largest_matrix = std::max({d * qd, d * ff, d * v});
  const double params = layers * (2 * d * qd + 2 * d * kv_dim() + 3 * d * ff + 4 * d + 2 * qd) +
                        (tie_word_embeddings ? 1 : 2) * d * v + d;
  lora.check_biases(qkv_bias, o_bias);
  lora.check_fits_model(fused_modules(), model_type());
  lora.check_target_pattern(lora_modules());
  lora.check_layers(num_layers);
  ZT_CHECK(largest_matrix <= 0x1p40 && params <= 0x1p48,
           "model config: " + shortest_decimal(params) +
               " parameters (hidden_size, intermediate_size, vocab_size, num_hidden_layers) "
               "are beyond what zerotrain can address (2^48 parameters, 2^40 per matrix)");
}

void ModelConfig::check_partial_rotary() const {
  if (partial_rotary_factor == 1.0) return;
  ZT_CHECK(partial_rotary_factor > 0 && partial_rotary_factor < 1,
           "model config: partial_rotary_factor must be in (0, 1], got " +
               shortest_decimal(partial_rotary_factor));
  ZT_CHECK(rotary_dims() >= 2 && rotary_dims() % 2 == 0,
           "model config: partial_rotary_factor " + shortest_decimal(partial_rotary_factor) +
               " rotates " + std::to_string(rotary_dims()) + " elements of a head of " +
               std::to_string(head_dim()) + "; an even count of at least 2 is needed");
  ZT_CHECK(fused_projections || is_glm(),
           "model config: partial_rotary_factor is implemented for Phi-3 (Phi-4-mini) and GLM "
           "only, as transformers applies it");
}

void ModelConfig::check_layers_without_rope() const {
  for (size_t i = 0; i < layers_without_rope.size(); ++i) {
    const int64_t l = layers_without_rope[i];
    ZT_CHECK(l >= 0 && l < num_layers && (i == 0 || l > layers_without_rope[i - 1]),
             "model config: the layers without RoPE must be distinct layers below " +
                 std::to_string(num_layers) + " in ascending order, got " + std::to_string(l));
  }
  // SmolLM3's attention is Llama's: no fused projections, q/k norms, Qwen2 biases or window.
  ZT_CHECK(layers_without_rope.empty() ||
               (!fused_projections && !qk_norm && qkv_bias == o_bias && sliding_window == 0),
           "model config: layers without RoPE (SmolLM3) with fused projections, q/k norms, "
           "Qwen2's biases or a sliding window are not a Hugging Face architecture");
}

void ModelConfig::check_gemma() const {
  const bool gelu = mlp_activation == GluActivation::kGeluTanh;
  ZT_CHECK((norm_weight_offset == 0.0f || norm_weight_offset == 1.0f) &&
               is_gemma() == scaled_embeddings && is_gemma() == gelu,
           "model config: Gemma's (1 + weight) norms, scaled embedding and GeGLU come together "
           "(model_type \"gemma\"); a part of them is not a Hugging Face architecture");
  // GemmaForCausalLM: Llama's attention (biases on all four projections or none), no window,
  // no rope scaling (transformers 4.46's Gemma applies none), every layer rotating its whole head.
  // Gemma 3's q/k norms and linear rope scaling (its full-attention layers') aside.
  const bool gemma3_rope = is_gemma3() && rope_scaling.type == RopeScaling::kLinear;
  ZT_CHECK(
      !is_gemma() || (!fused_projections && (!qk_norm || sandwich_norms) && qkv_bias == o_bias &&
                      (sliding_window == 0 || sandwich_norms) && layers_without_rope.empty() &&
                      (rope_scaling.type == RopeScaling::kNone || gemma3_rope)),
      "model config: Gemma with fused projections, q/k norms (Gemma 3's aside), Qwen2's "
      "biases, a sliding window (Gemma 2's and 3's aside), layers without RoPE or rope "
      "scaling (Gemma 3's linear aside) is not a Hugging Face architecture");
}

void ModelConfig::check_gemma2() const {
  ZT_CHECK(query_pre_attn_scalar >= 0.0 && std::isfinite(query_pre_attn_scalar) &&
               attn_logit_softcap >= 0.0f && std::isfinite(attn_logit_softcap) &&
               final_logit_softcap >= 0.0f && std::isfinite(final_logit_softcap),
           "model config: query_pre_attn_scalar and the soft caps must be positive and finite "
           "(0: none)");
  // Gemma2ForCausalLM: Gemma's model with the sandwich norms; its scale and caps come with it.
  ZT_CHECK(std::isfinite(attention_scores().scale),
           "model config: query_pre_attn_scalar " + std::to_string(query_pre_attn_scalar) +
               " gives no finite fp32 scale of the scores");
  const bool gemma2 = sandwich_norms && is_gemma();
  ZT_CHECK(gemma2 == (query_pre_attn_scalar > 0.0) &&
               (gemma2 || (attn_logit_softcap == 0.0f && final_logit_softcap == 0.0f)) &&
               (!sandwich_norms || is_gemma() || is_olmo2() || is_glm()),
           "model config: the sandwich norms, query_pre_attn_scalar and the soft caps are Gemma "
           "2's (model_type \"gemma2\", with Gemma's norms, embedding scale and GeGLU); a part of "
           "them is not a Hugging Face architecture");
}

void ModelConfig::check_sliding_window() const {
  ZT_CHECK(sliding_window >= 0, "model config: sliding_window must be >= 0 (0: none)");
  ZT_CHECK(sliding_window == 0 || sandwich_norms || (!qkv_bias && !qk_norm),
           "model config: a sliding window (Mistral) with attention biases or q/k norms is not "
           "implemented");
  ZT_CHECK(sliding_window == 0 || rope_scaling.type == RopeScaling::kNone || fused_projections ||
               is_gemma3() || is_olmo3() || is_ministral3(),
           "model config: a sliding window (Mistral) with rope_scaling is not implemented");
}

// Gemma3ForCausalLM: Gemma 2's model with q/k norms; its pattern and local base come with it, and
// a window (transformers' Gemma 3 builds its layers' masks from it). Olmo3ForCausalLM: OLMo 2's
// model with a pattern and a window, its windowed layers rotating with rope_theta.
void ModelConfig::check_layer_pattern() const {
  ZT_CHECK((sliding_window_pattern > 0) == (local_rope_theta > 0.0) &&
               (sliding_window_pattern > 0) == (is_gemma3() || is_olmo3()),
           "model config: sliding_window_pattern and rope_local_base_freq are Gemma 3's "
           "(model_type \"gemma3_text\", with Gemma 2's model and q/k norms) or, the pattern with "
           "the local base equal to rope_theta, OLMo 3's (model_type \"olmo3\"); a part of them is "
           "not a Hugging Face architecture");
  if (!is_gemma3() && !is_olmo3()) return;
  const std::string family = is_olmo3() ? "OLMo 3" : "Gemma 3";
  ZT_CHECK(sliding_window > 0, "model config: " + family + " needs a sliding_window");
  ZT_CHECK(attn_logit_softcap == 0.0f,
           "model config: transformers' Gemma 3 applies no attention soft cap");
  ZT_CHECK(std::isfinite(local_rope_theta) && static_cast<float>(local_rope_theta) > 0.0f,
           "model config: " + std::string(is_olmo3() ? "rope_theta" : "rope_local_base_freq") +
               " must be a positive finite number");
  ZT_CHECK(!is_olmo3() || local_rope_theta == rope_theta,
           "model config: OLMo 3's windowed layers rotate with rope_theta (" +
               shortest_decimal(rope_theta) + "), not " + shortest_decimal(local_rope_theta));
}

namespace {

// Llama's attention and norms, as OLMo 2 and Granite keep them: no Gemma norms, no fused
// projections, biases on all four projections or none, no window (but where `windowed`), RoPE in
// every layer.
bool llama_attention(const ModelConfig& c, bool windowed = false) {
  return !c.is_gemma() && !c.fused_projections && c.qkv_bias == c.o_bias &&
         (c.sliding_window == 0 || windowed) && c.layers_without_rope.empty();
}

}  // namespace

// Olmo2ForCausalLM: Llama's model with its norms moved after the attention and the MLP, and q/k
// norms over whole projections; Llama's attention otherwise (llama_attention; head_dim, rope
// scaling).
void ModelConfig::check_olmo2() const {
  ZT_CHECK(is_olmo2() == qk_norm_spans_heads && (!is_olmo2() || (sandwich_norms && qk_norm)),
           "model config: OLMo 2's norms after the attention and the MLP with none before them, "
           "and its q/k norms over whole projections, come together (model_type \"olmo2\"); a "
           "part of them is not a Hugging Face architecture");
  ZT_CHECK(!is_olmo2() || llama_attention(*this, is_olmo3()),
           "model config: OLMo 2 with Gemma's norms, fused projections, Qwen2's biases, a sliding "
           "window (OLMo 3's aside) or layers without RoPE is not a Hugging Face architecture");
  ZT_CHECK(!is_olmo2() || is_olmo3() || rope_scaling.type == RopeScaling::kNone ||
               (rope_scaling.type == RopeScaling::kLinear && rope_scaling.factor > 1.0),
           "model config: OLMo 2's rope scaling is linear with a factor above 1, or none "
           "(transformers' Olmo2Config refuses the others; its dynamic is not implemented)");
  ZT_CHECK(!is_olmo3() || rope_scaling.type == RopeScaling::kNone ||
               rope_scaling.type == RopeScaling::kYarn,
           "model config: OLMo 3's rope scaling is yarn (AllenAI's) or none; the others are not "
           "implemented for it");
}

// GraniteForCausalLM: Llama's model (biases on all four projections or none, Llama's rope
// scalings) with its four scalars, each positive and finite in fp32.
void ModelConfig::check_granite() const {
  auto positive = [](double m) {  // and so is its fp32 value
    return m > 0.0 && std::isfinite(static_cast<float>(m)) && static_cast<float>(m) > 0.0f;
  };
  ZT_CHECK((attention_multiplier == 0.0 || positive(attention_multiplier)) &&
               positive(embedding_multiplier) && positive(residual_multiplier) &&
               positive(logits_scaling) && positive(1.0 / logits_scaling),
           "model config: Granite's multipliers and logits_scaling must be positive numbers, "
           "finite and nonzero in fp32 (1 / logits_scaling too), got " +
               shortest_decimal(embedding_multiplier) + ", " +
               shortest_decimal(attention_multiplier) + ", " +
               shortest_decimal(residual_multiplier) + " and " + shortest_decimal(logits_scaling));
  const bool scalars_one =
      embedding_multiplier == 1.0 && residual_multiplier == 1.0 && logits_scaling == 1.0;
  ZT_CHECK(is_granite() || scalars_one,
           "model config: embedding_multiplier, residual_multiplier and logits_scaling are "
           "Granite's (model_type \"granite\", with its attention_multiplier); not a Hugging "
           "Face architecture otherwise");
  ZT_CHECK(!is_granite() || (llama_attention(*this) && !sandwich_norms && !qk_norm &&
                             rope_scaling.type != RopeScaling::kLongrope),
           "model config: Granite with Gemma's or OLMo 2's norms, fused projections, q/k norms, "
           "Qwen2's biases, a sliding window, layers without RoPE or longrope is not a Hugging "
           "Face architecture");
}

// GlmForCausalLM and Glm4ForCausalLM: Llama's model with its RoPE's pairs adjacent and gate/up
// fused in the checkpoint (both or neither), q/k/v biases or none and no o bias, Llama's norms
// (GLM-4 with its sandwich ones too), no window or q/k norms, every layer rotating (longrope is
// check_rope_scaling's: Phi-3's alone).
void ModelConfig::check_glm() const {
  ZT_CHECK(interleaved_rope == fused_gate_up,
           "model config: GLM's adjacent RoPE pairs and its fused gate_up_proj come together "
           "(model_type \"glm\" or \"glm4\"); a part of them is not a Hugging Face architecture");
  if (!is_glm()) return;
  ZT_CHECK(!is_gemma() && !fused_projections && !o_bias && !qk_norm && pre_norms &&
               sliding_window == 0 && layers_without_rope.empty() && !is_granite(),
           "model config: GLM with Gemma's norms, Phi-3's fused q/k/v, an o_proj bias, q/k norms, "
           "OLMo 2's norms, a sliding window, layers without RoPE or Granite's scalars is not a "
           "Hugging Face architecture");
}

void ModelConfig::check_ministral3() const {
  if (!is_ministral3()) return;
  ZT_CHECK(std::isfinite(llama4_scaling_beta) && llama4_scaling_positions > 0,
           "model config: Ministral 3's llama_4_scaling_beta must be a finite number ≥ 0, with a "
           "positive original_max_position_embeddings");
  ZT_CHECK(!is_gemma() && !fused_projections && !qkv_bias && !qk_norm && pre_norms &&
               !sandwich_norms && layers_without_rope.empty() && !is_granite() && !is_glm() &&
               partial_rotary_factor == 1.0,
           "model config: Ministral 3 with Gemma's norms, Phi-3's fused q/k/v, attention biases, "
           "q/k norms, OLMo 2's or GLM's norms, layers without RoPE, Granite's scalars or a "
           "partial rotation is not a Hugging Face architecture");
}

AttentionScores ModelConfig::attention_scores() const {
  AttentionScores scores;
  if (query_pre_attn_scalar > 0.0)
    scores.scale = static_cast<float>(std::pow(query_pre_attn_scalar, -0.5));
  if (is_granite()) scores.scale = static_cast<float>(attention_multiplier);
  scores.softcap = attn_logit_softcap;
  return scores;
}

AttentionScores ModelConfig::attention_scores(int layer, int64_t keys) const {
  AttentionScores scores = attention_scores();
  const int64_t window = layer_window(layer);
  if (window > 0 && window < keys) scores.window = window;
  return scores;
}

int64_t ModelConfig::layer_window(int layer) const {
  // Every period-th layer attends over every key: Gemma 3's pattern, Gemma 2's every other one.
  const int64_t period = sliding_window_pattern > 0     ? sliding_window_pattern
                         : sandwich_norms && is_gemma() ? 2
                                                        : 0;
  if (period > 0 && (layer + 1) % period == 0) return 0;
  return sliding_window;
}

float ModelConfig::embedding_scale(DType activations) const {
  if (is_granite()) return static_cast<float>(embedding_multiplier);
  if (!scaled_embeddings) return 1.0f;
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(hidden_size)));
  switch (activations) {
    case DType::kBf16:
      return round_to_bf16(scale);
    case DType::kFloat16:
      return round_to_fp16(scale);
    default:
      return scale;
  }
}

std::vector<int64_t> every_nth_layer(int64_t step, int64_t num_layers) {
  std::vector<int64_t> layers;
  for (int64_t l = step - 1; step > 0 && l < num_layers; l += step) layers.push_back(l);
  return layers;
}

int64_t ModelConfig::max_positions() const {
  // Ministral 3's queries are scaled from llama4_scaling_positions on, which is not implemented.
  int64_t longest = max_position_embeddings;
  if (rope_scaling.type == RopeScaling::kYarn)
    longest = std::max(
        longest,
        static_cast<int64_t>(std::floor(rope_scaling.factor *
                                        static_cast<double>(rope_scaling.original_max_positions))));
  if (is_ministral3() && llama4_scaling_beta > 0.0)
    longest = std::min(longest, llama4_scaling_positions);
  return longest;
}

std::string ModelConfig::max_positions_text() const {
  if (is_ministral3() && llama4_scaling_beta > 0.0 && max_positions() == llama4_scaling_positions)
    return "Ministral 3's original_max_position_embeddings, " +
           std::to_string(llama4_scaling_positions) +
           " (past it transformers scales the queries by llama_4_scaling_beta, which zerotrain "
           "does not implement)";
  return max_positions() == max_position_embeddings
             ? "max_position_embeddings " + std::to_string(max_position_embeddings)
             : "yarn's factor × original_max_position_embeddings, " +
                   std::to_string(max_positions());
}

RopeSpec ModelConfig::rope_for_length(int64_t length) const {
  RopeSpec r = rope();
  r.scaling.long_factors =
      rope_scaling.type == RopeScaling::kLongrope && length > rope_scaling.original_max_positions;
  return r;
}

RopeSpec ModelConfig::rope_for_layer(int layer, int64_t length) const {
  if (local_rope_theta <= 0.0 || layer_window(layer) == 0) return rope_for_length(length);
  RopeSpec r = RopeSpec::unscaled(static_cast<float>(local_rope_theta));
  r.rotary_dims = rope().rotary_dims;
  r.interleaved = interleaved_rope;
  return r;
}

std::string ModelConfig::set_lora(LoraSpec spec) {
  // A pattern's modules first (the LM head, a norm: named), then what it selects here.
  spec.check_target_pattern(lora_modules());
  std::string warning = spec.fit_to_model(fused_modules(), model_type());
  const std::string layers_warning = spec.fit_to_layers(num_layers);
  if (!layers_warning.empty())  // each line printed after "warning: "
    warning += (warning.empty() ? "" : "\nwarning: ") + layers_warning;
  lora = std::move(spec);
  return warning;
}

std::string ModelConfig::model_type() const {
  if (is_ministral3()) return "ministral3";
  if (is_olmo2()) return is_olmo3() ? "olmo3" : "olmo2";
  if (is_granite()) return "granite";
  if (is_glm()) return sandwich_norms ? "glm4" : "glm";
  if (sandwich_norms) return qk_norm ? "gemma3_text" : "gemma2";
  if (is_gemma()) return "gemma";
  if (fused_projections) return "phi3";
  if (qk_norm) return "qwen3";
  if (qkv_bias && !o_bias) return "qwen2";
  if (!layers_without_rope.empty()) return "smollm3";
  return sliding_window > 0 ? "mistral" : "llama";
}

ModelConfig preset_config(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    fail("unknown preset '" + name + "' (known: " + known + ")");
  }
  const PresetRow& p = it->second;
  ModelConfig c;
  c.hidden_size = p.d;
  c.num_layers = p.layers;
  c.num_heads = p.heads;
  c.num_kv_heads = p.kv_heads;
  c.intermediate_size = p.ffn;
  c.vocab_size = p.vocab;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.validate();
  return c;
}

std::vector<std::string> preset_names() {
  return {"tiny", "small", "125m", "1b", "6b", "7b"};
}

}  // namespace zt

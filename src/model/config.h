// Llama model configuration (Hugging Face LlamaConfig keys) and the built-in presets.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "backend/attention_scores.h"
#include "backend/glu_activation.h"
#include "backend/rope.h"
#include "model/lora.h"
#include "util/dtype.h"

namespace zt {

// The key of to_hf_json's object under which a LoRA model's adapters are described.
inline constexpr const char* kLoraConfigKey = "zerotrain_lora";

// Phi3Config's original_max_position_embeddings when config.json (or a GGUF file) gives none.
inline constexpr int64_t kPhi3DefaultOriginalPositions = 4096;

// What ModelConfig::from_hf_json does with a config.json key it neither reads nor knows to be
// inert.
enum class UnknownConfigKeys { kAccept, kRefuse };

// The most layers a model config may have (ModelConfig::validate), and its check where a reader
// first learns the count, before any per-layer list is built: 1 to kMaxLayers, else an error
// naming `source`.
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;
void check_layer_count(int64_t layers, const std::string& source);

struct ModelConfig {
  int64_t hidden_size = 0;        // d_model
  int64_t intermediate_size = 0;  // the gated MLP's hidden width
  int64_t num_layers = 0;         // num_hidden_layers
  int64_t num_heads = 0;          // num_attention_heads
  int64_t num_kv_heads = 0;       // num_key_value_heads (grouped-query attention)
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScalingParams rope_scaling;  // config.json rope_scaling: none, linear or llama3
  // The sliding attention window in tokens (0: none): Mistral's and Phi-3's on every layer,
  // Gemma 2's on every other one (layer_window); the query at position p sees keys p − w < j ≤ p
  // (backend/attention_scores.h).
  int64_t sliding_window = 0;
  // config.json's pad_token_id, which transformers makes the embedding's padding_idx: that row
  // gets no gradient from the token's occurrences as an input (a tied head's gradient still
  // reaches it). -1: none.
  int64_t padding_token = -1;
  bool tie_word_embeddings = false;
  // config.json's head_dim when it is not hidden_size / num_attention_heads (Qwen3, and Llama or
  // Mistral configs that set it); 0: that quotient. q_proj is then [H·head_dim, hidden_size].
  int64_t explicit_head_dim = 0;
  // Phi-4-mini's partial_rotary_factor (Phi-3 only, as transformers' Phi3 applies it from 4.49):
  // RoPE rotates the leading int(head_dim · factor) elements of each head, rotary_dims().
  double partial_rotary_factor = 1.0;
  // Biases of the attention projections (docs/ARCHITECTURE.md §3): q/k/v (Qwen2; attention_bias of
  // Llama and Qwen3) and o (attention_bias of Llama and Qwen3; Qwen2 has none).
  bool qkv_bias = false;
  bool o_bias = false;
  // Qwen3: an RMSNorm over each head of q and of k (weights [head_dim]) before RoPE.
  bool qk_norm = false;
  // Phi-3: the same model as Llama's, whose Hugging Face checkpoint stores q/k/v as one
  // self_attn.qkv_proj [q_dim + 2·kv_dim, hidden] and gate/up as one mlp.gate_up_proj
  // [2·intermediate, hidden] (rows in that order). The model directory keeps them apart
  // (model/hf_checkpoint_tensors.h joins and splits them at the Hugging Face boundary).
  bool fused_projections = false;
  // GLM (model_type "glm", GlmForCausalLM: glm-4-9b-chat-hf, glm-edge; "glm4", Glm4ForCausalLM:
  // GLM-4-0414 and GLM-Z1): Llama's model whose RoPE pairs adjacent elements (interleaved_rope,
  // RopeSpec::interleaved) of each head's leading int(head_dim · partial_rotary_factor) (half in
  // THUDM's files), whose checkpoint stores gate/up as one mlp.gate_up_proj (fused_gate_up; q, k
  // and v apart), with q/k/v biases (attention_bias; o_proj has none). The two come together.
  // GLM-4 adds norms on the attention's and the MLP's outputs (sandwich_norms, Llama's scaling by
  // the weight), named post_self_attn_layernorm and post_mlp_layernorm; its
  // post_attention_layernorm precedes the MLP, as Llama's.
  bool interleaved_rope = false;
  bool fused_gate_up = false;
  // SmolLM3's NoPE layers: those whose attention takes no RoPE (the zeros of config.json's
  // no_rope_layers; every fourth layer of SmolLM3-3B), ascending. Empty: every layer rotates.
  std::vector<int64_t> layers_without_rope;
  // Gemma: every RMSNorm scales by (1 + weight) (the weight stored as the checkpoint holds it:
  // norm_weight_offset 1), the embedding's output is multiplied by sqrt(hidden_size) rounded to the
  // activations' type (scaled_embeddings; the tied head reads the table unscaled), and the MLP is
  // GeGLU with the tanh form of GELU (mlp_activation). All three or none: model_type "gemma".
  float norm_weight_offset = 0.0f;
  bool scaled_embeddings = false;
  GluActivation mlp_activation = GluActivation::kSilu;
  // Gemma 2: the attention's output and the MLP's each pass through an RMSNorm of their own before
  // the residual add (sandwich_norms: post_attention_layernorm and post_feedforward_layernorm; the
  // norm before the MLP is pre_feedforward_layernorm), the scores are scaled by
  // query_pre_attn_scalar^−½ and soft-capped (attn_logit_softcapping), and so are the logits
  // (final_logit_softcapping): model_type "gemma2", with Gemma's three parts. 0: none.
  bool sandwich_norms = false;
  double query_pre_attn_scalar = 0.0;
  float attn_logit_softcap = 0.0f;
  float final_logit_softcap = 0.0f;
  // Gemma 3 (model_type "gemma3_text", Gemma3ForCausalLM): Gemma 2's model with per-head q/k norms
  // (qk_norm, scaling by 1 + weight as every Gemma norm), the window on every layer but each
  // sliding_window_pattern-th (transformers' is_sliding = (layer + 1) % P != 0: layers 5, 11, ...
  // attend over every key), and the windowed layers rotating with a base of their own,
  // local_rope_theta (rope_local_base_freq), unscaled: rope_theta and rope_scaling are the
  // full-attention layers'. OLMo 3 (model_type "olmo3", Olmo3ForCausalLM) is OLMo 2's model with
  // the same layout of windows (every fourth layer attending over every key in AllenAI's files),
  // its windowed layers rotating with rope_theta itself, unscaled (local_rope_theta = rope_theta),
  // and the scaling (yarn) on the others. 0: neither.
  int64_t sliding_window_pattern = 0;
  double local_rope_theta = 0.0;
  // OLMo 2 (model_type "olmo2", Olmo2ForCausalLM): Gemma 2's norms on the attention's and the
  // MLP's outputs (sandwich_norms: post_attention_layernorm and post_feedforward_layernorm) and
  // none before them (pre_norms false: the projections read the residual stream itself), and q/k
  // norms over all heads of a token at once (qk_norm_spans_heads: weights [q_dim] and [kv_dim],
  // before the heads are split) rather than over each head. All three or none, with Llama's norms.
  bool pre_norms = true;
  bool qk_norm_spans_heads = false;
  // Granite (model_type "granite", GraniteForCausalLM): Llama's model with four scalars, the
  // embedding's output times embedding_multiplier, the scores times attention_multiplier (in place
  // of 1/sqrt(head_dim)), the attention's and the MLP's outputs times residual_multiplier before
  // each residual add, and the logits divided by logits_scaling. attention_multiplier 0: not
  // Granite (the others then 1).
  double embedding_multiplier = 1.0;
  double attention_multiplier = 0.0;
  double residual_multiplier = 1.0;
  double logits_scaling = 1.0;
  // Ministral 3 (model_type "ministral3", Ministral3ForCausalLM: the text model of Mistral AI's
  // Ministral-3-3B, -8B and -14B): Mistral's model (yarn RoPE in Mistral AI's files, a window when
  // one is given) whose queries transformers multiplies after RoPE by
  // 1 + llama4_scaling_beta · ln(1 + ⌊position / llama4_scaling_positions⌋) (rope_parameters'
  // llama_4_scaling_beta and original_max_position_embeddings): exactly 1 below that length, the
  // only positions zerotrain takes (max_positions()). −1: not Ministral 3.
  double llama4_scaling_beta = -1.0;
  int64_t llama4_scaling_positions = 0;
  // LoRA adapters trained on the frozen projections (model/lora.h; `train --lora-*`). A model
  // directory holds the base, the adapter travels as PEFT's files; to_hf_json writes the spec
  // under kLoraConfigKey (the checkpoint manifest's model, which from_hf_json reads back).
  LoraSpec lora;

  bool is_gemma() const { return norm_weight_offset != 0.0f; }
  bool is_glm() const { return interleaved_rope; }
  // The projections the Hugging Face checkpoint (and PEFT) holds as one module.
  FusedModules fused_modules() const {
    return {fused_projections, fused_projections || fused_gate_up};
  }
  // The modules a LoRA target_modules pattern could select (LoraSpec::check_target_pattern).
  LoraModelModules lora_modules() const {
    return {num_layers, fused_modules(), qk_norm, sandwich_norms, pre_norms, is_glm()};
  }
  bool is_gemma3() const { return is_gemma() && sandwich_norms && qk_norm; }
  // OLMo 2's norms (OLMo 3 included: is_olmo3()).
  bool is_olmo2() const { return !pre_norms; }
  bool is_olmo3() const { return is_olmo2() && sliding_window_pattern > 0; }
  bool is_granite() const { return attention_multiplier > 0.0; }
  bool is_ministral3() const { return llama4_scaling_beta >= 0.0; }
  // What the logits are multiplied by: 1 / logits_scaling in fp32 (1 but for Granite).
  float logits_factor() const { return static_cast<float>(1.0 / logits_scaling); }
  // Whether a branch's output joins the residual stream as it is (the add done in its GEMM):
  // not with Gemma 2's and OLMo 2's norms on it, nor with Granite's residual_multiplier.
  bool plain_residual_add() const { return !sandwich_norms && residual_multiplier == 1.0; }
  // How attention forms its scores (backend/attention_scores.h): query_pre_attn_scalar^−½ as
  // transformers computes it in double and PyTorch multiplies fp32 scores by it (else
  // 1/sqrt(head_dim)), and attn_logit_softcap.
  AttentionScores attention_scores() const;
  // The same for layer `layer` attending over `keys` positions, with the layer's window where it
  // masks a key there (window < keys; a window the keys fit in is no window, so that the scores
  // equal full causal attention's bit for bit and the fused path stays open).
  AttentionScores attention_scores(int layer, int64_t keys) const;
  // Layer `layer`'s sliding window (0: none): Gemma 2's on its even layers (transformers'
  // Gemma2 is_sliding = not layer_idx % 2), Gemma 3's and OLMo 3's on all but every
  // sliding_window_pattern-th, Mistral's and Phi-3's on all.
  int64_t layer_window(int layer) const;
  // Sets Gemma's three changes above (model_type "gemma").
  void use_gemma_math() {
    norm_weight_offset = 1.0f;
    scaled_embeddings = true;
    mlp_activation = GluActivation::kGeluTanh;
  }
  // The factor on the embedding's output for activations stored as `activations`: Gemma's
  // sqrt(hidden_size) rounded to that type (transformers multiplies by it as a tensor of the
  // hidden states' dtype), Granite's embedding_multiplier in fp32 (a Python float there), else 1.
  float embedding_scale(DType activations) const;
  bool layer_rotates(int64_t layer) const {
    return !std::binary_search(layers_without_rope.begin(), layers_without_rope.end(), layer);
  }
  int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_heads;
  }
  int64_t q_dim() const { return head_dim() * num_heads; }
  int64_t kv_dim() const { return head_dim() * num_kv_heads; }
  // The Hugging Face architecture the model is written as: "phi3" (fused projections), "qwen3"
  // (q/k norms), "qwen2" (q/k/v biases without an o bias), "mistral" (a sliding window),
  // "smollm3" (layers without RoPE), "gemma" (its norms, embedding scale and GeGLU), "gemma2" and
  // "gemma3_text" (Gemma's with the sandwich norms), "olmo2" (no pre-norms), "olmo3" (OLMo 2's
  // with windows), "granite" (its four scalars), "glm" and "glm4", "ministral3" (its query
  // scaling), else "llama".
  std::string model_type() const;
  // transformers' int(head_dim · partial_rotary_factor), truncated.
  int64_t rotary_dims() const {
    return static_cast<int64_t>(static_cast<double>(head_dim()) * partial_rotary_factor);
  }
  RopeSpec rope() const {
    return {static_cast<float>(rope_theta), rope_scaling,
            rotary_dims() == head_dim() ? 0 : rotary_dims(), interleaved_rope};
  }
  // The rotation of sequences of `length` positions: with longrope, its long factors beyond
  // original_max_position_embeddings (transformers 4.46's Phi-3, by the forward's length).
  RopeSpec rope_for_length(int64_t length) const;
  // The longest sequence the model takes: max_position_embeddings, or with yarn the length it
  // scales to, ⌊factor · original_max_position_embeddings⌋, when longer (as vLLM sizes it:
  // Qwen's documented setting leaves max_position_embeddings at the original length).
  int64_t max_positions() const;
  // What max_positions() is, for messages: "max_position_embeddings 32768" or "yarn's factor ×
  // original_max_position_embeddings, 131072".
  std::string max_positions_text() const;
  // Layer `layer`'s rotation at that length: Gemma 3's and OLMo 3's windowed layers take
  // local_rope_theta, unscaled; every other layer rope_for_length(length).
  RopeSpec rope_for_layer(int layer, int64_t length) const;

  // Throws zt::Error naming the offending field when the shape is inconsistent.
  void validate() const;
  void check_rope_scaling() const;         // part of validate()
  void check_partial_rotary() const;       // part of validate()
  void check_layers_without_rope() const;  // part of validate()
  void check_gemma() const;                // part of validate()
  void check_gemma2() const;               // part of validate()
  void check_layer_pattern() const;        // part of validate()
  void check_olmo2() const;                // part of validate()
  void check_granite() const;              // part of validate()
  void check_glm() const;                  // part of validate()
  void check_ministral3() const;           // part of validate()
  void check_sliding_window() const;       // part of validate()

  // HF config.json of model_type() (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
  // Qwen3ForCausalLM, Phi3ForCausalLM, SmolLM3ForCausalLM or GemmaForCausalLM; torch_dtype
  // bfloat16): the model
  // directory's config.json, and the object a checkpoint manifest compares and fingerprints.
  nlohmann::json to_hf_json() const;
  // The config.json of an export for transformers: to_hf_json() with rope_scaling's older "type"
  // beside "rope_type", which transformers before 4.43 reads.
  nlohmann::json to_transformers_json() const;
  // Parses an HF config.json object (transformers 4.x or 5.x: rope_theta and rope_scaling, or
  // rope_parameters); `source` names the file in error messages. A key that would change the
  // mathematics away from what zerotrain implements (a rope type other than default, linear or
  // llama3, MLP biases, hidden_act other than silu (Gemma's: the tanh GELU), a sliding window
  // shorter than the sequence, quantized weights, a model_type other than llama, mistral, qwen2,
  // qwen3, phi3, smollm3 and gemma) is refused naming it. A key it neither reads nor knows to be
  // inert (hf_config_unknown_keys) is accepted, or refused with UnknownConfigKeys::kRefuse (import
  // --strict-config).
  static ModelConfig from_hf_json(const nlohmann::json& j, const std::string& source,
                                  UnknownConfigKeys unknown = UnknownConfigKeys::kAccept);
  static ModelConfig from_hf_file(const std::string& path,
                                  UnknownConfigKeys unknown = UnknownConfigKeys::kAccept);

  bool operator==(const ModelConfig&) const = default;
  // Sets the adapters, fitted to this model's projections (LoraSpec::fit_to_model: Phi-3's are
  // fused). Returns fit_to_model's warning, or "".
  std::string set_lora(LoraSpec spec);
  // The same model without its adapters (what a model directory holds).
  ModelConfig base() const {
    ModelConfig b = *this;
    b.lora = LoraSpec{};
    return b;
  }
};

// The keys of an HF config.json object that ModelConfig::from_hf_json reads past because they are
// known not to change the model (ids, dtype, versions, initialisation), for a run's record.
std::vector<std::string> hf_config_ignored_keys(const nlohmann::json& j);
// The keys it neither reads nor knows: transformers' modelling code does not read them either
// (it reads only the attributes it defines), so they are accepted with a warning by default.
std::vector<std::string> hf_config_unknown_keys(const nlohmann::json& j);
// The key zerotrain reads that an unknown `key` of `j` is most likely a misspelling of
// ("rope_theta" for "rope_thetta"; "text_config.K" for a multimodal file's "text_config.…"), or "".
std::string hf_config_key_hint(const std::string& key, const nlohmann::json& j);

// Layers step − 1, 2·step − 1, ... below num_layers: SmolLM3's layers without RoPE when every
// step-th takes none (SmolLM3Config's no_rope_layer_interval, llama.cpp's n_no_rope_layer_step).
std::vector<int64_t> every_nth_layer(int64_t step, int64_t num_layers);

// Presets (docs/running.md lists their shapes): tiny, small, 125m, 1b, 6b, 7b.
ModelConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace zt

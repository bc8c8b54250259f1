// The key tables of model/hf_config_keys.h.
#include "model/hf_config_keys.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace zt {

bool listed(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// Keys known not to change the model: ids, dtypes, versions, initialisation and generation
// settings, attributes every transformers config carries, and the extras published configs add
// (SmolLM2's is_llama_config and transformers.js_config, nanotron's rope_interleaved once it is
// checked false). transformers' Llama, Mistral and Qwen modelling code reads none of them.
const std::vector<std::string>& inert_hf_keys() {
  static const std::vector<std::string> keys = {"_name_or_path",
                                                "architectures",
                                                "bos_token_id",
                                                "eos_token_id",
                                                "unk_token_id",
                                                "sep_token_id",
                                                "decoder_start_token_id",
                                                "torch_dtype",
                                                "dtype",
                                                "transformers_version",
                                                "use_cache",
                                                "initializer_range",
                                                "pretraining_tp",
                                                "tokenizer_class",
                                                "output_attentions",
                                                "output_hidden_states",
                                                "return_dict",
                                                "model_type",
                                                "max_window_layers",
                                                "is_llama_config",
                                                "rope_interleaved",
                                                "transformers.js_config",
                                                "_attn_implementation_autoset",
                                                "id2label",
                                                "label2id",
                                                "problem_type",
                                                "task_specific_params",
                                                "finetuning_task",
                                                "torchscript",
                                                "use_bfloat16",
                                                "is_decoder",
                                                "is_encoder_decoder",
                                                "add_cross_attention",
                                                "tie_encoder_decoder",
                                                "chunk_size_feed_forward",
                                                "prefix",
                                                "tf_legacy_loss",
                                                "max_length",
                                                "min_length",
                                                "do_sample",
                                                "early_stopping",
                                                "num_beams",
                                                "temperature",
                                                "top_k",
                                                "top_p",
                                                "repetition_penalty",
                                                "length_penalty",
                                                "no_repeat_ngram_size",
                                                "num_return_sequences",
                                                "bad_words_ids"};
  return keys;
}

// Keys read, or checked to hold the one value zerotrain computes.
const std::vector<std::string>& read_hf_keys() {
  static const std::vector<std::string> keys = {kLoraConfigKey,
                                                "hidden_size",
                                                "intermediate_size",
                                                "num_hidden_layers",
                                                "num_attention_heads",
                                                "num_key_value_heads",
                                                "vocab_size",
                                                "max_position_embeddings",
                                                "rms_norm_eps",
                                                "rope_theta",
                                                "rope_scaling",
                                                "rope_parameters",
                                                "partial_rotary_factor",
                                                "tie_word_embeddings",
                                                "pad_token_id",
                                                "hidden_act",
                                                "attention_bias",
                                                "mlp_bias",
                                                "sliding_window",
                                                "use_sliding_window",
                                                "attention_dropout",
                                                "embd_pdrop",
                                                "resid_pdrop",
                                                "head_dim",
                                                "layer_types",
                                                "use_mrope",
                                                "use_bidirectional_attention",
                                                "quantization_config"};
  return keys;
}

// The architectures zerotrain implements, by config.json model_type, and the class transformers
// loads each as.
const std::map<std::string, std::string>& hf_architectures() {
  static const std::map<std::string, std::string> table = {{"llama", "LlamaForCausalLM"},
                                                           {"mistral", "MistralForCausalLM"},
                                                           {"qwen2", "Qwen2ForCausalLM"},
                                                           {"qwen3", "Qwen3ForCausalLM"},
                                                           {"phi3", "Phi3ForCausalLM"},
                                                           {"smollm3", "SmolLM3ForCausalLM"},
                                                           {"gemma", "GemmaForCausalLM"},
                                                           {"gemma2", "Gemma2ForCausalLM"},
                                                           {"gemma3_text", "Gemma3ForCausalLM"},
                                                           {"olmo2", "Olmo2ForCausalLM"},
                                                           {"olmo3", "Olmo3ForCausalLM"},
                                                           {"granite", "GraniteForCausalLM"},
                                                           {"glm", "GlmForCausalLM"},
                                                           {"glm4", "Glm4ForCausalLM"},
                                                           {"ministral3", "Ministral3ForCausalLM"}};
  return table;
}

bool is_qwen(const std::string& type) {
  return type == "qwen2" || type == "qwen3";
}

bool is_glm_type(const std::string& type) {
  return type == "glm" || type == "glm4";
}

bool has_windowed_layers(const std::string& type) {
  return type == "gemma2" || type == "gemma3_text" || type == "olmo3";
}

namespace {

// The model_type of the class every entry of config.json's `architectures` names, or "" when
// they name none zerotrain implements, or several; an empty list names none ("llama").
std::string model_type_of_architectures(const nlohmann::json& archs) {
  if (archs.is_array() && archs.empty()) return "llama";
  std::string found;
  for (const auto& [type, class_name] : hf_architectures())
    if (archs.is_array() && !archs.empty() &&
        std::all_of(archs.begin(), archs.end(), [&](const auto& a) { return a == class_name; }))
      found = type;
  return found;
}

}  // namespace

// config.json's model_type, or "" when it is not one zerotrain implements. Without the key, the
// family its `architectures` names (a config saved for MistralForCausalLM.from_pretrained), and
// "llama" when it has neither (LlamaConfig's defaults).
std::string model_type_of(const nlohmann::json& j) {
  if (!j.contains("model_type"))
    return j.contains("architectures") ? model_type_of_architectures(j.at("architectures"))
                                       : "llama";
  const auto& type = j.at("model_type");
  return type.is_string() && hf_architectures().count(type.get<std::string>())
             ? type.get<std::string>()
             : "";
}

// Keys that transformers reads but that do not change a family's model: Qwen's and SmolLM3's
// sliding window while use_sliding_window is false (refused otherwise), and Qwen2's attention_bias
// (its q/k/v projections have biases and its o projection none, whatever the key says).
std::vector<std::string> family_ignored_keys(const std::string& type) {
  if (type == "qwen2") return {"sliding_window", "attention_bias"};
  if (type == "qwen3" || type == "smollm3") return {"sliding_window"};
  // GlmMLP has no bias and reads no mlp_bias.
  if (is_glm_type(type)) return {"mlp_bias"};
  // gemma-2-9b's first files say sliding_window_size beside sliding_window, which transformers'
  // Gemma2Config reads; the hybrid cache is generate()'s.
  if (type == "gemma2") return {"sliding_window_size", "cache_implementation"};
  // transformers 4.53 and later write _sliding_window_pattern beside layer_types and read neither
  // it nor anything from it.
  if (type == "gemma3_text") return {"cache_implementation", "_sliding_window_pattern"};
  return {};
}

// Keys a family reads beside read_hf_keys: Phi-3's original_max_position_embeddings (kept with or
// without longrope, which reads it), SmolLM3's layers without RoPE, Gemma's hidden_activation,
// Granite's scalars.
std::vector<std::string> family_read_keys(const std::string& type) {
  if (type == "phi3") return {"original_max_position_embeddings"};
  if (type == "gemma") return {"hidden_activation"};
  if (type == "gemma2")
    return {"hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping",
            "final_logit_softcapping"};
  if (type == "gemma3_text")
    return {"hidden_activation",       "query_pre_attn_scalar",  "attn_logit_softcapping",
            "final_logit_softcapping", "sliding_window_pattern", "rope_local_base_freq"};
  if (type == "smollm3") return {"no_rope_layers", "no_rope_layer_interval"};
  if (type == "granite")
    return {"embedding_multiplier", "attention_multiplier", "residual_multiplier",
            "logits_scaling"};
  return {};
}

// transformers 4.46's MistralConfig, Qwen2Config, Phi3Config and GemmaConfig, 4.49's Olmo2Config
// (pad_token_id 1), 4.50's Gemma3TextConfig, 4.54's Qwen3Config and SmolLM3Config (which keeps
// PretrainedConfig's tied embeddings), 4.57's Olmo3Config (pad_token_id 1) with no rope_theta
// (0: 4.57 reads an absent one as 10000, 5.x as 500000, so model/hf_config_rope.cpp refuses it),
// 4.49's GlmConfig and 4.57's Glm4Config (pad_token_id 151329, GLM-4-9B's <|endoftext|>; 2
// key/value heads), 5.x's Ministral3Config (pad_token_id 11; its rope_theta 1e6 is its default
// rope_parameters', read with them in model/hf_config_rope.cpp).
const HfFamilyDefaults& hf_family_defaults(const std::string& type) {
  static const std::map<std::string, HfFamilyDefaults> table = {
      {"llama", {"LlamaConfig"}},
      {"mistral", {"MistralConfig", -1, 8}},
      {"qwen2", {"Qwen2Config", -1, 32}},
      {"qwen3", {"Qwen3Config", -1, 32}},
      {"phi3", {"Phi3Config", 32000}},
      {"smollm3", {"SmolLM3Config", 128004, 4, true, 2000000.0}},
      {"gemma", {"GemmaConfig", 0, 16, true}},
      {"gemma2", {"Gemma2Config", 0, 16, true}},
      {"gemma3_text", {"Gemma3TextConfig", 0, 4, true, 1000000.0}},
      {"olmo2", {"Olmo2Config", 1}},
      {"olmo3", {"Olmo3Config", 1, 0, false, 0.0}},
      {"granite", {"GraniteConfig"}},
      {"glm", {"GlmConfig", 151329, 2}},
      {"glm4", {"Glm4Config", 151329, 2}},
      {"ministral3", {"Ministral3Config", 11, 8, false, 1000000.0}}};
  return table.at(type);
}

}  // namespace zt

// Reading and writing Hugging Face's config.json (model/config.h): which keys change the model and
// are read, which are refused at any other value than the one zerotrain computes, which are known
// not to change the model, and what an unknown key gets (docs/models.md: the key policy).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <type_traits>

#include "model/config.h"
#include "model/hf_config_gemma.h"
#include "model/hf_config_keys.h"
#include "model/hf_config_rope.h"
#include "model/hf_config_value.h"
#include "util/closest_name.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

// Keys zerotrain implements only at one value (the model it computes): anything else is refused,
// naming the key, instead of training a different model than the checkpoint's.
void check_fixed_hf_keys(const nlohmann::json& j, const std::string& source,
                         const std::string& type) {
  auto refuse = [&](const std::string& key, const std::string& why) {
    fail(source + ": '" + key + "': " + quoted_json(j.at(key)) + " " + why);
  };
  if (j.contains("architectures")) {
    const auto& archs = j.at("architectures");
    bool ok = archs.is_array();
    for (const auto& a : archs.is_array() ? archs : nlohmann::json::array())
      ok = ok && a == hf_architectures().at(type);
    if (!ok)
      refuse("architectures", "names another model than model_type \"" + type + "\" (" +
                                  hf_architectures().at(type) + ")");
  }
  auto must_be = [&](const char* key, const nlohmann::json& value, const std::string& why) {
    if (j.contains(key) && j.at(key) != value) refuse(key, why);
  };
  if (is_gemma_type(type)) {
    check_gemma_activation(j, source, type);
  } else if (j.contains("hidden_act") && j.at("hidden_act") != "swish") {
    // transformers' activation table maps "swish" to the same SiLU as "silu".
    must_be("hidden_act", "silu", "is not implemented (zerotrain's MLP is SwiGLU with silu)");
  }
  if (!is_glm_type(type))  // (GLM's MLP reads no mlp_bias: an ignored key there)
    must_be("mlp_bias", false, "is not implemented (the MLP projections have no bias)");
  if (type == "mistral" || type == "phi3" || type == "ministral3")
    must_be("attention_bias", false,
            "is not applied by transformers' " + hf_architectures().at(type) + " (no biases)");
  must_be("use_mrope", false, "is not implemented (multimodal rotary positions of Qwen2-VL)");
  // transformers 4.56 and later write it (EmbeddingGemma's encoder sets it true).
  if (j.contains("use_bidirectional_attention") && !j.at("use_bidirectional_attention").is_null())
    must_be("use_bidirectional_attention", false,
            "is not implemented (a causal language model's attention)");
  must_be("use_sliding_window", false,
          "is not implemented (Qwen's sliding window; Mistral's is read from sliding_window)");
  must_be("rope_interleaved", false,
          "says the checkpoint pairs RoPE's elements another way than transformers' rotate-half, "
          "which zerotrain computes");
  if (j.contains("quantization_config"))
    refuse("quantization_config",
           "says the weights are quantized; zerotrain imports BF16, F16 or F32 safetensors (or a "
           "GGUF file)");
  // Phi-3's embd_pdrop and resid_pdrop drop the embedding's output and each residual branch.
  for (const char* key : {"attention_dropout", "embd_pdrop", "resid_pdrop"})
    if (j.contains(key) && !(j.at(key).is_number() && j.at(key).get<double>() == 0.0))
      refuse(key, "is not implemented (no dropout)");
  // transformers 4.53 and later write it; Gemma 2's and 3's list their windowed and full layers,
  // which must be the family's pattern (model/hf_config_gemma.cpp).
  // (null: the family's default, as transformers reads it)
  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    const bool windowed = has_windowed_layers(type);
    bool full = j.at("layer_types").is_array();
    for (const auto& t : full ? j.at("layer_types") : nlohmann::json::array())
      full = full && (t == "full_attention" || (windowed && t == "sliding_attention"));
    if (!full)
      refuse("layer_types", windowed ? "is not implemented (each layer \"full_attention\" or "
                                       "\"sliding_attention\")"
                                     : "is not implemented (every layer is \"full_attention\")");
    const nlohmann::json& layers = j.value("num_hidden_layers", nlohmann::json());
    if (layers.is_number_integer() && j.at("layer_types").size() != layers.get<size_t>())
      refuse("layer_types", "has " + std::to_string(j.at("layer_types").size()) +
                                " entries for num_hidden_layers " + layers.dump() +
                                " (one entry per layer)");
  }
}

// SmolLM3's layers without RoPE: the zeros of no_rope_layers, a 0/1 entry per layer (longer lists
// are read as transformers reads them, by layer index); without it, every no_rope_layer_interval-th
// layer (4), as SmolLM3Config derives it.
std::vector<int64_t> layers_without_rope_from_json(const nlohmann::json& j,
                                                   const std::string& source,
                                                   const std::string& type, int64_t layers) {
  if (type != "smollm3") return {};
  if (!j.contains("no_rope_layers") || j.at("no_rope_layers").is_null()) {
    const auto interval = j.contains("no_rope_layer_interval")
                              ? required_key<int64_t>(j, "no_rope_layer_interval", source)
                              : int64_t{4};
    ZT_CHECK(interval != 0,
             source + ": 'no_rope_layer_interval' is 0 (transformers divides by it)");
    // Python's (l + 1) % interval != 0: a negative interval marks the same layers.
    return every_nth_layer(interval < 0 ? -interval : interval, layers);
  }
  const nlohmann::json& list = j.at("no_rope_layers");
  ZT_CHECK(list.is_array() && static_cast<int64_t>(list.size()) >= layers,
           source + ": 'no_rope_layers' must list a 1 (RoPE) or 0 (none) for each of the " +
               std::to_string(layers) + " layers, got " + quoted_json(list));
  // Read as Python reads `if use_rope:`: a number or a boolean, zero or false for none.
  std::vector<int64_t> out;
  for (int64_t l = 0; l < layers; ++l) {
    const nlohmann::json& entry = list.at(static_cast<size_t>(l));
    ZT_CHECK(entry.is_number() || entry.is_boolean(),
             source + ": 'no_rope_layers' entry " + std::to_string(l) + " is " +
                 quoted_json(entry) + ", not 1 (RoPE) or 0 (none)");
    if (entry.is_boolean() ? !entry.get<bool>() : entry.get<double>() == 0.0) out.push_back(l);
  }
  return out;
}

// config.json "pad_token_id": null or absent is none; a negative id counts from the end of the
// vocabulary, as torch's nn.Embedding takes its padding_idx; outside [-vocab_size, vocab_size)
// transformers cannot build the model, and it is refused.
// An absent key is the family's default (hf_family_defaults: Phi3Config's 32000, Phi-3's
// <|endoftext|>, SmolLM3Config's 128004), a row transformers' model then makes the padding_idx.
int64_t padding_token_from_json(const nlohmann::json& j, const std::string& source,
                                int64_t vocab_size, const std::string& type) {
  const HfFamilyDefaults& defaults = hf_family_defaults(type);
  const int64_t family_default = defaults.pad_token_id;
  if (!j.contains("pad_token_id") && family_default >= 0) {
    ZT_CHECK(family_default < vocab_size,
             source + ": has no 'pad_token_id', and " + defaults.config_class + "'s default " +
                 std::to_string(family_default) + " is not a row of the embedding (vocab_size " +
                 std::to_string(vocab_size) +
                 "), so transformers cannot build this model: give pad_token_id (null: none)");
    return family_default;
  }
  if (!j.contains("pad_token_id") || j.at("pad_token_id").is_null()) return -1;
  const auto id = required_key<int64_t>(j, "pad_token_id", source);
  ZT_CHECK(id >= -vocab_size && id < vocab_size, source + ": 'pad_token_id' " + std::to_string(id) +
                                                     " is not a row of the embedding (vocab_size " +
                                                     std::to_string(vocab_size) + ")");
  return id < 0 ? vocab_size + id : id;
}

// config.json "sliding_window": null (or absent outside Mistral) is none; Mistral's config
// defaults an absent key to 4096, as transformers' MistralConfig does (Phi3Config to none).
// transformers' Llama ignores the key, so a window is refused outside Mistral and Phi-3; Mistral's
// rotary embedding (4.46) has no scaling, so a scaling is refused there.
int64_t sliding_window_from_json(const nlohmann::json& j, const std::string& source,
                                 const std::string& type, const RopeScalingParams& scaling) {
  // use_sliding_window is false (check_fixed_hf_keys)
  if (is_qwen(type) || type == "smollm3") return 0;
  const bool mistral = type == "mistral";
  const bool gemma3 = type == "gemma3_text";
  // Ministral3Config: a window when one is given (none when absent), with any scaling.
  const bool ministral3 = type == "ministral3";
  if ((mistral || is_gemma_type(type)) && scaling.type != RopeScaling::kNone &&
      !(gemma3 && scaling.type == RopeScaling::kLinear))
    fail(source + ": 'rope_scaling' is not applied by transformers' " +
         (mistral  ? "Mistral"
          : gemma3 ? "Gemma 3 other than linear (its full-attention layers'; gemma-3-4b's and "
                     "larger) is not implemented"
                   : "Gemma and Gemma 2 (4.46; later releases apply it)") +
         "; refused rather than computing another model than transformers does");
  if (type == "phi3" && scaling.type != RopeScaling::kNone &&
      scaling.type != RopeScaling::kLongrope)
    fail(source + ": 'rope_scaling' of a Phi-3 config is read by transformers as longrope alone");
  if (type != "phi3" && scaling.type == RopeScaling::kLongrope)
    fail(source +
         ": 'rope_scaling' of type longrope is implemented for Phi-3 (model_type \"phi3\") "
         "only");
  // Gemma 2's window (Gemma2Config's default 4096) is every other layer's, from the first; Gemma
  // 3's (Gemma3TextConfig's default 4096) and OLMo 3's (Olmo3Config's 4096) all but every
  // sliding_window_pattern-th layer's.
  const bool gemma_window = has_windowed_layers(type);
  if (!j.contains("sliding_window")) return mistral || gemma_window ? 4096 : 0;
  // transformers' Gemma 2 and 3 and OLMo 3 build their windowed layers' masks from it: null fails
  // there.
  ZT_CHECK(!gemma_window || !j.at("sliding_window").is_null(),
           source + ": 'sliding_window' is null, which transformers' " +
               (gemma3            ? "Gemma 3"
                : type == "olmo3" ? "OLMo 3"
                                  : "Gemma 2") +
               " cannot build (absent, it is 4096)");
  if (j.at("sliding_window").is_null()) return 0;
  ZT_CHECK(mistral || ministral3 || type == "phi3" || gemma_window,
           source + ": 'sliding_window' " + quoted_json(j.at("sliding_window")) +
               " outside a Mistral, Ministral 3, Phi-3, Gemma 2, Gemma 3 or OLMo 3 config "
               "(model_type \"mistral\", \"ministral3\", \"phi3\", \"gemma2\", "
               "\"gemma3_text\" or \"olmo3\") is not implemented");
  const auto w = required_key<int64_t>(j, "sliding_window", source);
  ZT_CHECK(w > 0, source + ": 'sliding_window' must be null or positive, got " + std::to_string(w));
  return w;
}

// Granite's four scalars, GraniteConfig's 1.0 where absent (a null one is refused: transformers'
// Granite multiplies by it); validate() checks that each is positive.
void read_granite(const nlohmann::json& j, const std::string& source, const std::string& type,
                  ModelConfig& c) {
  if (type != "granite") return;
  auto scalar = [&](const char* key) {
    return j.contains(key) ? required_key<double>(j, key, source) : 1.0;
  };
  c.embedding_multiplier = scalar("embedding_multiplier");
  c.attention_multiplier = scalar("attention_multiplier");
  c.residual_multiplier = scalar("residual_multiplier");
  c.logits_scaling = scalar("logits_scaling");
  ZT_CHECK(c.attention_multiplier > 0.0,
           source + ": 'attention_multiplier' must be a positive number, got " +
               quoted_json(j.at("attention_multiplier")));
}

// OLMo 3: OLMo 2's layers with a window on all but every fourth (Olmo3Config's layer_types when
// the file has none), or as layer_types lists them; the windowed layers rotate with rope_theta,
// unscaled.
void read_olmo3_layers(const nlohmann::json& j, const std::string& source, const std::string& type,
                       ModelConfig& c) {
  if (type != "olmo3") return;
  const int64_t period = layer_types_period(j, source);
  c.sliding_window_pattern = period > 0 ? period : 4;
  c.local_rope_theta = c.rope_theta;
}

// The attention's shape by family: head_dim (Qwen3's default 128, else hidden_size /
// num_attention_heads), the projections' biases (Qwen2: q/k/v always; Llama, Qwen3 and SmolLM3:
// attention_bias, all four) and Qwen3's q/k norms. A head_dim equal to the quotient is kept
// implicit, so a config written with and without it is one model.
void read_attention_shape(const nlohmann::json& j, const std::string& source,
                          const std::string& type, ModelConfig& c) {
  const bool has_head_dim = j.contains("head_dim") && !j.at("head_dim").is_null();
  int64_t head_dim = has_head_dim ? required_key<int64_t>(j, "head_dim", source) : 0;
  // transformers' Qwen3Config, GlmConfig, Glm4Config and Ministral3Config default (null is the
  // quotient in Ministral3Config)
  if (!j.contains("head_dim") && type == "ministral3") head_dim = 128;
  if (!has_head_dim && (type == "qwen3" || is_glm_type(type))) head_dim = 128;
  // GemmaConfig's default; a null one is kept as None there, which its attention cannot use (nor
  // can GLM's).
  ZT_CHECK(!is_glm_type(type) || !j.contains("head_dim") || has_head_dim,
           source +
               ": 'head_dim' is null, which transformers' GLM cannot build (absent, it is "
               "128)");
  ZT_CHECK(!is_gemma_type(type) || !j.contains("head_dim") || has_head_dim,
           source +
               ": 'head_dim' is null, which transformers' Gemma cannot build (absent, it is "
               "256)");
  if (!has_head_dim && is_gemma_type(type)) head_dim = 256;
  ZT_CHECK(!has_head_dim || head_dim > 0,
           source + ": 'head_dim' must be positive, got " + std::to_string(head_dim));
  if ((type == "qwen2" || type == "phi3" || type == "granite") && has_head_dim &&
      head_dim * c.num_heads != c.hidden_size)
    fail(source + ": 'head_dim': " + std::to_string(head_dim) +
         " differs from hidden_size / num_attention_heads = " +
         std::to_string(c.num_heads > 0 ? c.hidden_size / c.num_heads : 0) +
         ", which transformers' " + hf_architectures().at(type) +
         " uses up to 4.46 (later releases read head_dim); refused rather than computing another "
         "model than some release");
  const bool quotient = c.num_heads > 0 && head_dim * c.num_heads == c.hidden_size;
  c.explicit_head_dim = quotient ? 0 : head_dim;
  // Mistral's attention_bias is refused by check_fixed_hf_keys; Qwen2's is ignored.
  const bool olmo2 = type == "olmo2" || type == "olmo3";
  const bool attention_bias = (type == "llama" || type == "qwen3" || type == "smollm3" ||
                               is_gemma_type(type) || olmo2 || type == "granite") &&
                              j.contains("attention_bias") &&
                              required_key<bool>(j, "attention_bias", source);
  // GlmConfig's and Glm4Config's attention_bias (default true) is q/k/v's alone.
  const bool glm_bias = is_glm_type(type) && (!j.contains("attention_bias") ||
                                              required_key<bool>(j, "attention_bias", source));
  c.qkv_bias = type == "qwen2" || attention_bias || glm_bias;
  c.o_bias = type != "qwen2" && attention_bias;
  c.qk_norm = type == "qwen3" || olmo2;
  // OLMo 2: norms after the attention and the MLP, none before; q/k norms over whole projections.
  // GLM-4: norms on the attention's and the MLP's outputs too.
  c.sandwich_norms = olmo2 || type == "glm4";
  c.pre_norms = !olmo2;
  c.qk_norm_spans_heads = olmo2;
  c.fused_projections = type == "phi3";
  c.interleaved_rope = c.fused_gate_up = is_glm_type(type);
  read_gemma_family(j, source, type, c);
  read_granite(j, source, type, c);
  read_olmo3_layers(j, source, type, c);
}

bool is_inert_key(const std::string& key, const std::string& type) {
  return listed(inert_hf_keys(), key) || listed(family_ignored_keys(type), key);
}

}  // namespace

std::vector<std::string> hf_config_ignored_keys(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (!j.is_object()) return out;
  const std::string type = model_type_of(j);
  for (const auto& [key, value] : j.items())
    if (is_inert_key(key, type)) out.push_back(key);
  return out;
}

std::vector<std::string> hf_config_unknown_keys(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (!j.is_object()) return out;
  const std::string type = model_type_of(j);
  for (const auto& [key, value] : j.items())
    if (!listed(read_hf_keys(), key) && !listed(family_read_keys(type), key) &&
        !is_inert_key(key, type))
      out.push_back(key);
  return out;
}

std::string hf_config_key_hint(const std::string& key, const nlohmann::json& j) {
  std::vector<std::string> read = read_hf_keys();
  for (const std::string& k : family_read_keys(model_type_of(j))) read.push_back(k);
  const std::string prefix = "text_config.";  // a multimodal checkpoint's text model
  const bool nested = key.rfind(prefix, 0) == 0;
  const std::string closest = closest_name(nested ? key.substr(prefix.size()) : key, read);
  return closest.empty() ? "" : (nested ? prefix : "") + closest;
}

nlohmann::json ModelConfig::to_hf_json() const {
  const std::string type = model_type();
  nlohmann::json j{{"architectures", {hf_architectures().at(type)}},
                   {"model_type", type},
                   {"hidden_size", hidden_size},
                   {"intermediate_size", intermediate_size},
                   {"num_hidden_layers", num_layers},
                   {"num_attention_heads", num_heads},
                   {"num_key_value_heads", num_kv_heads},
                   {"vocab_size", vocab_size},
                   {"max_position_embeddings", max_position_embeddings},
                   {"rms_norm_eps", rms_norm_eps},
                   {"rope_theta", rope_theta},
                   {"tie_word_embeddings", tie_word_embeddings},
                   {"hidden_act", is_gemma() ? "gelu_pytorch_tanh" : "silu"},
                   {"torch_dtype", "bfloat16"}};
  // Written only when set: the manifest's model fingerprint hashes this object, and checkpoints
  // written before rope_scaling (or head_dim) existed must keep matching it.
  if (rope_scaling.type != RopeScaling::kNone)
    j["rope_scaling"] = rope_scaling_to_json(rope_scaling);
  if (explicit_head_dim > 0 || type == "qwen3" || is_gemma_type(type) || is_glm_type(type) ||
      type == "ministral3")
    j["head_dim"] = head_dim();
  if (lora.enabled()) j[kLoraConfigKey] = lora.to_json();
  if (padding_token >= 0) j["pad_token_id"] = padding_token;
  if (type == "mistral") {
    j["sliding_window"] = sliding_window;
  } else if (type == "ministral3") {
    // As Ministral3Config writes them: the scaling and the base in rope_parameters alone.
    j.erase("rope_scaling");
    j.erase("rope_theta");
    j["rope_parameters"] = ministral3_rope_parameters(*this);
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nlohmann::json();
    // Written when none, too: Ministral3Config would read its absence as 11.
    if (padding_token < 0) j["pad_token_id"] = nullptr;
  } else if (type == "phi3") {
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nlohmann::json();
    // Written when none, too: Phi3Config would read its absence as 32000.
    if (padding_token < 0) j["pad_token_id"] = nullptr;
    j["original_max_position_embeddings"] = rope_scaling.original_max_positions;
    if (partial_rotary_factor != 1.0) j["partial_rotary_factor"] = partial_rotary_factor;
  } else if (type == "llama") {
    j["attention_bias"] = qkv_bias;
    j["mlp_bias"] = false;
  } else if (is_gemma_type(type)) {
    write_gemma_keys(*this, j);
  } else if (type == "granite") {
    j["attention_bias"] = qkv_bias;
    j["mlp_bias"] = false;
    j["embedding_multiplier"] = embedding_multiplier;
    j["attention_multiplier"] = attention_multiplier;
    j["residual_multiplier"] = residual_multiplier;
    j["logits_scaling"] = logits_scaling;
  } else if (type == "olmo2" || type == "olmo3") {
    j["attention_bias"] = qkv_bias;
    // Written when none, too: Olmo2Config and Olmo3Config would read its absence as 1.
    if (padding_token < 0) j["pad_token_id"] = nullptr;
    if (type == "olmo3") {
      j["sliding_window"] = sliding_window;
      nlohmann::json types = nlohmann::json::array();
      for (int l = 0; l < num_layers; ++l)
        types.push_back(layer_window(l) > 0 ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
    }
  } else if (is_glm_type(type)) {
    j["attention_bias"] = qkv_bias;
    j["partial_rotary_factor"] = partial_rotary_factor;
    // Written when none, too: GlmConfig and Glm4Config would read its absence as 151329.
    if (padding_token < 0) j["pad_token_id"] = nullptr;
  } else if (type == "smollm3") {
    nlohmann::json rotates = nlohmann::json::array();
    for (int64_t l = 0; l < num_layers; ++l) rotates.push_back(layer_rotates(l) ? 1 : 0);
    j["no_rope_layers"] = rotates;
    j["use_sliding_window"] = false;
    j["attention_bias"] = qkv_bias;
    j["mlp_bias"] = false;
    // Written when none, too: SmolLM3Config would read its absence as 128004.
    if (padding_token < 0) j["pad_token_id"] = nullptr;
  } else {
    j["use_sliding_window"] = false;
    if (type == "qwen3") j["attention_bias"] = qkv_bias;
  }
  return j;
}

nlohmann::json ModelConfig::to_transformers_json() const {
  nlohmann::json j = to_hf_json();
  // transformers before 4.43 reads the scaling's type from "type" only; later releases take
  // both when they agree.
  // (longrope is written with "type" alone, as Phi3Config requires.)
  if (j.contains("rope_scaling") && j["rope_scaling"].contains("rope_type"))
    j["rope_scaling"]["type"] = j["rope_scaling"]["rope_type"];
  // Olmo2Config (4.47 to 4.57) refuses any rope_scaling but {"type", "factor"}.
  if (j.contains("rope_scaling") && model_type() == "olmo2")
    j["rope_scaling"] = {{"type", "linear"}, {"factor", rope_scaling.factor}};
  return j;
}

ModelConfig ModelConfig::from_hf_json(const nlohmann::json& j, const std::string& source,
                                      UnknownConfigKeys unknown) {
  ZT_CHECK(j.is_object(), source + ": expected a JSON object");
  const std::string type = model_type_of(j);
  if (type.empty() && !j.contains("model_type"))
    fail(source +
         ": has no 'model_type', and 'architectures': " + quoted_json(j.at("architectures")) +
         " names no one model zerotrain implements (LlamaForCausalLM, MistralForCausalLM, "
         "Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, SmolLM3ForCausalLM, "
         "GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Olmo2ForCausalLM, "
         "Olmo3ForCausalLM, GraniteForCausalLM, GlmForCausalLM, Glm4ForCausalLM, "
         "Ministral3ForCausalLM)");
  if (type.empty())
    fail(source + ": 'model_type': " + quoted_json(j.at("model_type")) +
         " is not an architecture zerotrain implements (llama, mistral, qwen2, qwen3, phi3, "
         "smollm3, gemma, gemma2, gemma3_text, olmo2, olmo3, granite, glm, glm4, ministral3)");
  ModelConfig c;
  c.hidden_size = required_key<int64_t>(j, "hidden_size", source);
  c.intermediate_size = required_key<int64_t>(j, "intermediate_size", source);
  c.num_layers = required_key<int64_t>(j, "num_hidden_layers", source);
  check_layer_count(c.num_layers, source);  // before any per-layer list is built
  c.num_heads = required_key<int64_t>(j, "num_attention_heads", source);
  // Absent, each family's config class default (hf_family_defaults; Llama's and Phi-3's: the
  // query heads); null is the query heads in every one.
  const HfFamilyDefaults& defaults = hf_family_defaults(type);
  const int64_t absent_kv_heads =
      defaults.num_key_value_heads > 0 ? defaults.num_key_value_heads : c.num_heads;
  c.num_kv_heads = !j.contains("num_key_value_heads") ? absent_kv_heads
                   : j.at("num_key_value_heads").is_null()
                       ? c.num_heads
                       : required_key<int64_t>(j, "num_key_value_heads", source);
  c.vocab_size = required_key<int64_t>(j, "vocab_size", source);
  c.max_position_embeddings = required_key<int64_t>(j, "max_position_embeddings", source);
  c.rms_norm_eps = required_key<double>(j, "rms_norm_eps", source);
  const nlohmann::json rope_json = with_family_rope_defaults(j, source, type);
  read_rope(rope_json, source, type, defaults.rope_theta, c);
  read_rope_lengths(rope_json, source, type, c);
  read_llama4_scaling(rope_json, source, type, c);
  c.sliding_window = sliding_window_from_json(j, source, type, c.rope_scaling);
  c.padding_token = padding_token_from_json(j, source, c.vocab_size, type);
  c.tie_word_embeddings = j.contains("tie_word_embeddings")
                              ? required_key<bool>(j, "tie_word_embeddings", source)
                              : defaults.tie_word_embeddings;
  read_attention_shape(j, source, type, c);
  read_sliding_rope(j, source, c);
  c.layers_without_rope = layers_without_rope_from_json(j, source, type, c.num_layers);
  c.partial_rotary_factor = partial_rotary_from_json(rope_json, source, type);
  if (j.contains(kLoraConfigKey))
    c.set_lora(LoraSpec::from_peft_json(j.at(kLoraConfigKey), source + " " + kLoraConfigKey));
  try {
    c.validate();
  } catch (const Error& e) {
    fail(source + ": " + e.what());
  }
  check_fixed_hf_keys(j, source, type);
  if (unknown == UnknownConfigKeys::kRefuse) {
    const std::vector<std::string> keys = hf_config_unknown_keys(j);
    const std::string hint = keys.empty() ? "" : hf_config_key_hint(keys.front(), j);
    if (!keys.empty())
      fail(source + ": unknown key '" + keys.front() + "'" +
           (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
           " (--strict-config refuses keys zerotrain neither reads nor knows to leave the model "
           "unchanged; without it they are accepted with a warning)");
  }
  return c;
}

ModelConfig ModelConfig::from_hf_file(const std::string& path, UnknownConfigKeys unknown) {
  std::error_code ec;
  ZT_CHECK(std::filesystem::is_regular_file(path, ec),
           "model config '" + path + "' is not a file" +
               (std::filesystem::is_directory(path, ec) ? " (it is a directory)" : ""));
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "cannot open model config '" + path + "'");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return from_hf_json(parse_json(text, path), path, unknown);
}

}  // namespace zt

#include "model/hf_multimodal_config.h"

#include <array>
#include <tuple>
#include <utility>

#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

constexpr std::array<MultimodalWrapper, 2> kWrappers = {{
    {"gemma3", "Gemma3ForConditionalGeneration", "gemma3_text", "Gemma3ForCausalLM", "Gemma 3"},
    {"mistral3", "Mistral3ForConditionalGeneration", "mistral", "MistralForCausalLM", "Mistral 3"},
}};

// The text models a wrapper holds beyond its first (Mistral3ForConditionalGeneration: Mistral
// Small's mistral, Ministral 3's ministral3), as {wrapper, text model_type, class}.
constexpr std::array<std::array<const char*, 3>, 1> kOtherTextModels = {{
    {"mistral3", "ministral3", "Ministral3ForCausalLM"},
}};

// The text config class's defaults (transformers 4.50's Gemma3TextConfig, MistralConfig, 5.x's
// Ministral3Config) for the keys zerotrain requires; the others take the family's defaults when
// read.
nlohmann::json required_defaults(const std::string& text_model_type) {
  if (text_model_type == "ministral3")
    return {{"hidden_size", 4096},     {"intermediate_size", 14336},
            {"num_hidden_layers", 34}, {"num_attention_heads", 32},
            {"vocab_size", 131072},    {"max_position_embeddings", 262144},
            {"rms_norm_eps", 1e-5}};
  if (text_model_type == "gemma3_text")
    return {{"hidden_size", 2304},     {"intermediate_size", 9216},
            {"num_hidden_layers", 26}, {"num_attention_heads", 8},
            {"vocab_size", 262208},    {"max_position_embeddings", 131072},
            {"rms_norm_eps", 1e-6}};
  return {{"hidden_size", 4096},     {"intermediate_size", 14336},
          {"num_hidden_layers", 32}, {"num_attention_heads", 32},
          {"vocab_size", 32000},     {"max_position_embeddings", 131072},
          {"rms_norm_eps", 1e-6}};
}

}  // namespace

const MultimodalWrapper* multimodal_wrapper(const nlohmann::json& j) {
  if (!j.is_object()) return nullptr;
  for (const MultimodalWrapper& w : kWrappers) {
    if (j.contains("model_type")
            ? j.at("model_type") == w.model_type
            : j.contains("architectures") &&
                  j.at("architectures") == nlohmann::json::array({w.architecture}))
      return &w;
  }
  return nullptr;
}

nlohmann::json multimodal_text_config(const nlohmann::json& j, const MultimodalWrapper& wrapper,
                                      const std::string& source) {
  ZT_CHECK(j.contains("text_config") && j.at("text_config").is_object(),
           source + ": a " + wrapper.name + " multimodal config (" + wrapper.architecture +
               ") without a 'text_config' object");
  nlohmann::json text = j.at("text_config");
  std::string type = wrapper.text_model_type, architecture = wrapper.text_architecture;
  std::string known = std::string("\"") + type + "\"";
  for (const auto& [outer, other, other_architecture] : kOtherTextModels) {
    if (outer != std::string(wrapper.model_type)) continue;
    known += std::string(" or \"") + other + "\"";
    if (text.contains("model_type") && text.at("model_type") == other)
      std::tie(type, architecture) = std::pair{other, other_architecture};
  }
  ZT_CHECK(!text.contains("model_type") || text.at("model_type") == type,
           source + ": 'text_config' has model_type " + quoted_json(text.at("model_type")) +
               ", not " + known + " (the " + wrapper.name + " text models zerotrain imports)");
  const nlohmann::json defaults = required_defaults(type);
  for (const auto& [key, value] : defaults.items())
    if (!text.contains(key)) text[key] = value;
  text["model_type"] = type;
  text["architectures"] = {architecture};
  // A quantized checkpoint says so at the top level: refused as the text model's key.
  if (j.contains("quantization_config")) text["quantization_config"] = j.at("quantization_config");
  return text;
}

std::vector<std::string> multimodal_keys(const nlohmann::json& j) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items())
    if (key != "text_config") keys.push_back(key);
  return keys;
}

}  // namespace zt

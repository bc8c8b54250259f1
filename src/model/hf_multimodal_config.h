// Multimodal checkpoints whose language model zerotrain imports (docs/models.md, "Multimodal
// checkpoints"): Gemma3ForConditionalGeneration (gemma-3-4b/12b/27b as published) and
// Mistral3ForConditionalGeneration (Mistral-Small-3.1-24B and 3.2-24B) keep the text model's config
// as `text_config`, sparse as their config class writes it, beside a vision tower's. The text model
// is read as its own family's config.json.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

struct MultimodalWrapper {
  const char* model_type;         // the wrapper's: "gemma3", "mistral3"
  const char* architecture;       // "Gemma3ForConditionalGeneration", ...
  const char* text_model_type;    // text_config's: "gemma3_text", "mistral"
  const char* text_architecture;  // the text model's class: "Gemma3ForCausalLM", ...
  const char* name;               // for messages: "Gemma 3", "Mistral 3"
};

// The wrapper whose config `j` is (by model_type, or without it by architectures), or nullptr.
const MultimodalWrapper* multimodal_wrapper(const nlohmann::json& j);
// The text model's config.json: text_config with its config class's defaults written for the
// keys it leaves out that zerotrain requires, and the text model's model_type and architectures.
// A missing or non-object text_config, or one of another model_type, is refused naming the file.
nlohmann::json multimodal_text_config(const nlohmann::json& j, const MultimodalWrapper& wrapper,
                                      const std::string& source);
// The wrapper's own keys (the vision tower's, the image tokens'), which the text model leaves
// unread.
std::vector<std::string> multimodal_keys(const nlohmann::json& j);

}  // namespace zt

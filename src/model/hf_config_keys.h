// The tables of config.json keys behind model/hf_config.cpp's policy (docs/models.md: the
// key policy): the architectures zerotrain implements by model_type, the keys it reads, those known
// not to change a model, and each family's own.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zt {

bool listed(const std::vector<std::string>& keys, const std::string& key);
// Keys known not to change the model (ids, dtypes, versions, generation settings, ...).
const std::vector<std::string>& inert_hf_keys();
// Keys read, or checked to hold the one value zerotrain computes.
const std::vector<std::string>& read_hf_keys();
// model_type -> the class transformers loads it as.
const std::map<std::string, std::string>& hf_architectures();
bool is_qwen(const std::string& type);
// "glm" and "glm4" (GlmForCausalLM, Glm4ForCausalLM).
bool is_glm_type(const std::string& type);
// The families whose layer_types list windowed ("sliding_attention") layers: Gemma 2, Gemma 3 and
// OLMo 3.
bool has_windowed_layers(const std::string& type);
// config.json's model_type ("" when it is not one zerotrain implements); without the key, the
// family its `architectures` names, or "llama".
std::string model_type_of(const nlohmann::json& j);
// Keys transformers reads that do not change a family's model, and keys a family reads beside
// read_hf_keys.
std::vector<std::string> family_ignored_keys(const std::string& type);
std::vector<std::string> family_read_keys(const std::string& type);

// What a family's transformers config class takes for a key config.json leaves out, where that
// is not LlamaConfig's: pad_token_id (-1: none), num_key_value_heads (0: the query heads),
// tie_word_embeddings and rope_theta.
struct HfFamilyDefaults {
  const char* config_class = "LlamaConfig";
  int64_t pad_token_id = -1;
  int64_t num_key_value_heads = 0;
  bool tie_word_embeddings = false;
  double rope_theta = 10000.0;
};
const HfFamilyDefaults& hf_family_defaults(const std::string& type);

}  // namespace zt

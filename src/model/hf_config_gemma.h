// The config.json keys of Gemma's families (model/hf_config.cpp's helpers): Gemma's MLP
// activation keys, Gemma 2's sandwich norms, attention scale and soft caps, and Gemma 3's q/k
// norms, layer pattern and local RoPE base, read and written as transformers 4.46's GemmaConfig
// and Gemma2Config and 4.50's Gemma3TextConfig take them (docs/models.md, Gemma).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace zt {

// model_type "gemma", "gemma2" or "gemma3_text".
bool is_gemma_type(const std::string& type);
// Refuses an MLP activation other than Gemma's tanh GELU, naming the key.
void check_gemma_activation(const nlohmann::json& j, const std::string& source,
                            const std::string& type);
// Gemma's three parts, and for "gemma2" its sandwich norms, query_pre_attn_scalar (Gemma2Config's
// default 224) and soft caps (50 and 30 absent, none when null); for "gemma3_text" the same with
// Gemma3TextConfig's defaults (256, no caps), q/k norms, its pattern and local RoPE base.
void read_gemma_family(const nlohmann::json& j, const std::string& source, const std::string& type,
                       ModelConfig& c);
// The period of config.json's layer_types (Gemma 2's, Gemma 3's and OLMo 3's): every period-th
// layer "full_attention", the others "sliding_attention" (a period past the last layer when none
// is full); 0 without the key. Another list is refused naming it.
int64_t layer_types_period(const nlohmann::json& j, const std::string& source);
// The keys of a Gemma, Gemma 2 or Gemma 3 config.json beside the common ones.
void write_gemma_keys(const ModelConfig& c, nlohmann::json& j);

}  // namespace zt

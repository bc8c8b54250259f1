// config.json's RoPE keys, read and written for model/hf_config.cpp: rope_theta and rope_scaling
// (transformers 4.x) or rope_parameters (5.x; Gemma 3's one object per layer type), the rope
// types default, linear, llama3, yarn and Phi-3's longrope, Phi-3's original length and its
// partial rotation (docs/models.md: the key policy).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace zt {

// rope_theta and the scaling: from rope_parameters (5.x) or rope_theta and rope_scaling (4.x;
// without rope_theta, absent_theta, the family's default). A config holding both spellings must
// say the same in each. Other rope types and unknown keys inside are refused naming the key.
void read_rope(const nlohmann::json& j, const std::string& source, const std::string& type,
               double absent_theta, ModelConfig& c);
// The lengths the scaling reads beside it, once max_position_embeddings is read: Phi-3's original
// length (top-level original_max_position_embeddings, Phi3Config's default 4096) and longrope's
// factor on cos and sin; yarn's original length where its object has none.
void read_rope_lengths(const nlohmann::json& j, const std::string& source, const std::string& type,
                       ModelConfig& c);
// Gemma 3's sliding layers' base from 5.x's per-layer-type rope_parameters, which must agree
// with rope_local_base_freq.
void read_sliding_rope(const nlohmann::json& j, const std::string& source, ModelConfig& c);
// partial_rotary_factor (top-level, or in 5.x's rope_parameters): Phi-3's and GLM's read (GLM's
// default 0.5), 1 elsewhere.
double partial_rotary_from_json(const nlohmann::json& j, const std::string& source,
                                const std::string& type);
// Ministral 3 (model_type "ministral3"): `j` with Ministral3Config's default rope_parameters
// (yarn, factor 16 over 16384 positions, theta 1e6, llama_4_scaling_beta 0.1) where it gives no
// RoPE key; a rope_theta without rope_parameters is refused (which wins is unclear). Other
// families: `j`.
nlohmann::json with_family_rope_defaults(const nlohmann::json& j, const std::string& source,
                                         const std::string& type);
// Ministral 3's query scaling from its rope object (rope_parameters or rope_scaling):
// llama_4_scaling_beta and the original_max_position_embeddings it divides the positions by,
// both required (transformers reads both whatever β is); a max_position_embeddings inside
// must be the top-level one. Other families: none.
void read_llama4_scaling(const nlohmann::json& j, const std::string& source,
                         const std::string& type, ModelConfig& c);
// Ministral 3's rope_parameters as Ministral3Config writes them: the scaling, rope_theta and
// llama_4_scaling_beta.
nlohmann::json ministral3_rope_parameters(const ModelConfig& c);
// The scaling as config.json's rope_scaling object (null for none).
nlohmann::json rope_scaling_to_json(const RopeScalingParams& p);

}  // namespace zt

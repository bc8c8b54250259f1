// OLMo 2 (Olmo2ForCausalLM, model_type "olmo2"): Llama's model with an RMSNorm on the attention's
// and the MLP's outputs before each residual add and none before them, and q/k norms over a
// token's whole projection. What Olmo2Config (transformers 4.49) reads from the published
// OLMo-2-1124-13B-Instruct config.json (tests/data/hf_models), its defaults where a file leaves
// keys out, what is refused, and what is written back. The model is checked against transformers
// in oracle_hf_olmo2 and oracle_hf_olmo2_bias_linear.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/layout.h"
#include "support/error_text.h"

namespace zt {
namespace {

nlohmann::json olmo2_13b_instruct_json() {
  std::ifstream in(std::string(ZT_SOURCE_DIR) +
                   "/tests/data/hf_models/allenai--OLMo-2-1124-13B-Instruct/config.json");
  return nlohmann::json::parse(in);
}

ModelConfig read(const nlohmann::json& j) {
  return ModelConfig::from_hf_json(j, "olmo2.json", UnknownConfigKeys::kRefuse);
}

std::string error_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = olmo2_13b_instruct_json();
  j[key] = value;
  return error_of([&] { read(j); });
}

TEST(Olmo2Config, Olmo2_13bInstructIsReadWithItsNormsAfterAndWholeQkNorms) {
  const ModelConfig c = read(olmo2_13b_instruct_json());
  EXPECT_EQ(c.model_type(), "olmo2");
  EXPECT_TRUE(c.is_olmo2() && !c.pre_norms && c.sandwich_norms && c.qk_norm &&
              c.qk_norm_spans_heads);
  EXPECT_FALSE(c.is_gemma() || c.is_gemma3() || c.qkv_bias || c.o_bias);
  EXPECT_EQ(c.padding_token, 100277);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.head_dim(), 128);
  // OLMo 2's names: post_attention_layernorm and post_feedforward_layernorm follow the attention
  // and the MLP; no input_layernorm, no norm before the MLP; q_norm and k_norm span every head.
  const ParamLayout layout(c);
  EXPECT_EQ(layout.tensor(TensorRole::kAttnOutNorm, 3).name,
            "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(layout.tensor(TensorRole::kMlpOutNorm, 3).name,
            "model.layers.3.post_feedforward_layernorm.weight");
  EXPECT_EQ(layout.find_role(TensorRole::kInputNorm, 3), nullptr);
  EXPECT_EQ(layout.find_role(TensorRole::kPostAttnNorm, 3), nullptr);
  EXPECT_EQ(layout.tensor(TensorRole::kQNorm, 3).shape, std::vector<int64_t>{5120});
  EXPECT_EQ(layout.tensor(TensorRole::kKNorm, 3).shape, std::vector<int64_t>{5120});
  EXPECT_EQ(layout.tensors().size(), 2u + 40u * 11u + 1u);
  const nlohmann::json written = c.to_hf_json();
  EXPECT_EQ(written.at("architectures"), nlohmann::json({"Olmo2ForCausalLM"}));
  EXPECT_EQ(written.at("attention_bias"), false);
  EXPECT_EQ(written.at("pad_token_id"), 100277);
  EXPECT_EQ(read(written), c);
}

// Absent keys take Olmo2Config's defaults: pad_token_id 1 (a row transformers makes the
// padding_idx), the query heads for num_key_value_heads. A model without a padding token is
// written with pad_token_id null, which Olmo2Config would otherwise read as 1.
TEST(Olmo2Config, AbsentKeysTakeOlmo2ConfigsDefaults) {
  nlohmann::json j = olmo2_13b_instruct_json();
  j.erase("pad_token_id");
  j.erase("num_key_value_heads");
  const ModelConfig d = read(j);
  EXPECT_EQ(d.padding_token, 1);
  EXPECT_EQ(d.num_kv_heads, 40);
  j["pad_token_id"] = nullptr;
  const ModelConfig none = read(j);
  EXPECT_EQ(none.padding_token, -1);
  EXPECT_TRUE(none.to_hf_json().at("pad_token_id").is_null());
  EXPECT_EQ(read(none.to_hf_json()), none);
  // attention_bias puts biases on all four projections, as Olmo2Attention builds them.
  j["attention_bias"] = true;
  const ModelConfig biased = read(j);
  EXPECT_TRUE(biased.qkv_bias && biased.o_bias);
  EXPECT_EQ(read(biased.to_hf_json()), biased);
}

// Olmo2Config takes a rope_scaling of exactly {"type": "linear" or "dynamic", "factor"}; an export
// writes linear in that form (to_transformers_json), not with "rope_type" beside "type".
TEST(Olmo2Config, LinearRopeScalingIsWrittenAsOlmo2ConfigReadsIt) {
  nlohmann::json j = olmo2_13b_instruct_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  const ModelConfig c = read(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kLinear);
  EXPECT_EQ(c.to_transformers_json().at("rope_scaling"),
            nlohmann::json({{"type", "linear"}, {"factor", 4.0}}));
  EXPECT_EQ(read(c.to_transformers_json()), c);
}

TEST(Olmo2Config, WhatOlmo2DoesNotComputeIsRefusedNamingTheKey) {
  const nlohmann::json llama3 = {{"rope_type", "llama3"},
                                 {"factor", 8.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 8192}};
  EXPECT_NE(error_with("rope_scaling", llama3).find("OLMo 2's rope scaling is linear"),
            std::string::npos);
  EXPECT_NE(error_with("rope_scaling", {{"type", "yarn"}, {"factor", 4.0}})
                .find("OLMo 2's rope scaling is linear"),
            std::string::npos);
  EXPECT_NE(error_with("rope_scaling", {{"type", "linear"}, {"factor", 1.0}})
                .find("linear with a factor above 1"),
            std::string::npos);
  EXPECT_NE(error_with("sliding_window", 4096).find("'sliding_window'"), std::string::npos);
  EXPECT_NE(error_with("hidden_act", "gelu").find("'hidden_act'"), std::string::npos);
  EXPECT_NE(error_with("architectures", {"LlamaForCausalLM"}).find("'architectures'"),
            std::string::npos);
  EXPECT_NE(error_with("attention_dropout", 0.1).find("'attention_dropout'"), std::string::npos);
  // OLMo 3's class is another model_type's (Olmo3ForCausalLM, test_olmo3_config.cpp).
  EXPECT_NE(error_with("model_type", "olmo3").find("names another model than model_type \"olmo3\""),
            std::string::npos);
}

// The three parts of OLMo 2's layer come together, without Gemma's norms or a window.
TEST(Olmo2Config, OnlyOlmo2sWholeLayerIsAModel) {
  ModelConfig c = read(olmo2_13b_instruct_json());
  ModelConfig part = c;
  part.qk_norm_spans_heads = false;  // per-head q/k norms without pre-norms: no HF model
  EXPECT_NE(error_of([&] { part.validate(); }).find("OLMo 2's norms"), std::string::npos);
  part = c;
  part.pre_norms = true;  // Gemma 2's sandwich without Gemma, q/k norms over whole projections
  EXPECT_NE(error_of([&] { part.validate(); }).find("not a Hugging Face architecture"),
            std::string::npos);
  part = c;
  part.sliding_window = 4096;
  EXPECT_NE(error_of([&] { part.validate(); }).find("a sliding window"), std::string::npos);
  part = c;
  part.use_gemma_math();
  EXPECT_NE(error_of([&] { part.validate(); }).find("model config"), std::string::npos);
}

}  // namespace
}  // namespace zt

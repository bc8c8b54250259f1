// Granite (GraniteForCausalLM, model_type "granite"): Llama's model with four scalars, the
// embedding's output times embedding_multiplier, the scores times attention_multiplier, each
// branch's output times residual_multiplier before its residual add, and the logits divided by
// logits_scaling. What GraniteConfig (transformers 4.46) reads from the published
// granite-3.3-8b-instruct config.json (tests/data/hf_models), its defaults where a file leaves
// keys out, what is refused, and what is written back. The model is checked against transformers
// in oracle_hf_granite, oracle_hf_granite_bias_llama3 and oracle_hf_detects_granite_without_*.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "support/error_text.h"

namespace zt {
namespace {

nlohmann::json granite_33_8b_instruct_json() {
  std::ifstream in(std::string(ZT_SOURCE_DIR) +
                   "/tests/data/hf_models/ibm-granite--granite-3.3-8b-instruct/config.json");
  return nlohmann::json::parse(in);
}

ModelConfig read(const nlohmann::json& j) {
  return ModelConfig::from_hf_json(j, "granite.json", UnknownConfigKeys::kRefuse);
}

std::string error_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = granite_33_8b_instruct_json();
  j[key] = value;
  return error_of([&] { read(j); });
}

TEST(GraniteConfig, Granite33_8bInstructIsReadWithItsFourScalars) {
  const ModelConfig c = read(granite_33_8b_instruct_json());
  EXPECT_EQ(c.model_type(), "granite");
  EXPECT_TRUE(c.is_granite() && !c.plain_residual_add());
  EXPECT_EQ(c.embedding_multiplier, 12.0);
  EXPECT_EQ(c.attention_multiplier, 0.0078125);
  EXPECT_EQ(c.residual_multiplier, 0.22);
  EXPECT_EQ(c.logits_scaling, 16.0);
  // The scores' scale is the multiplier (1/128 here, with head_dim 128, not 128^−½), the
  // embedding's factor the multiplier in fp32 (no rounding to the activations' type), the logits'
  // 1/16.
  EXPECT_EQ(c.attention_scores().scale, 0.0078125f);
  EXPECT_EQ(c.embedding_scale(DType::kBf16), 12.0f);
  EXPECT_EQ(c.logits_factor(), 0.0625f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.padding_token, 0);
  const nlohmann::json written = c.to_hf_json();
  EXPECT_EQ(written.at("architectures"), nlohmann::json({"GraniteForCausalLM"}));
  EXPECT_EQ(written.at("residual_multiplier"), 0.22);
  EXPECT_EQ(read(written), c);
}

// Absent scalars are GraniteConfig's 1.0: the scores then take 1, not 1/sqrt(head_dim).
TEST(GraniteConfig, AbsentScalarsAreGraniteConfigsOnes) {
  nlohmann::json j = granite_33_8b_instruct_json();
  for (const char* key :
       {"embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"})
    j.erase(key);
  const ModelConfig d = read(j);
  EXPECT_TRUE(d.is_granite());
  EXPECT_EQ(d.attention_scores().scale, 1.0f);
  EXPECT_EQ(d.embedding_scale(DType::kFloat32), 1.0f);
  EXPECT_TRUE(d.plain_residual_add());
  EXPECT_EQ(d.model_type(), "granite");
  EXPECT_EQ(read(d.to_hf_json()), d);
  j["attention_bias"] = true;  // on all four projections, as GraniteAttention builds them
  const ModelConfig biased = read(j);
  EXPECT_TRUE(biased.qkv_bias && biased.o_bias);
}

TEST(GraniteConfig, WhatGraniteDoesNotComputeIsRefusedNamingTheKey) {
  EXPECT_NE(error_with("residual_multiplier", nullptr).find("'residual_multiplier'"),
            std::string::npos);
  EXPECT_NE(error_with("attention_multiplier", 0.0).find("'attention_multiplier'"),
            std::string::npos);
  EXPECT_NE(error_with("logits_scaling", -16.0).find("logits_scaling must be positive"),
            std::string::npos);
  EXPECT_NE(error_with("embedding_multiplier", 1e300).find("finite and nonzero in fp32"),
            std::string::npos);
  EXPECT_NE(error_with("mlp_bias", true).find("'mlp_bias'"), std::string::npos);
  // 4.46's Granite ignores head_dim, later releases read it: one model in neither.
  EXPECT_NE(error_with("head_dim", 64).find("'head_dim': 64 differs"), std::string::npos);
  EXPECT_NE(error_with("sliding_window", 4096).find("'sliding_window'"), std::string::npos);
  EXPECT_NE(error_with("architectures", {"LlamaForCausalLM"}).find("'architectures'"),
            std::string::npos);
}

// The scalars are Granite's alone: another family with one of them is no Hugging Face model.
TEST(GraniteConfig, OnlyGraniteHasTheScalars) {
  ModelConfig c = preset_config("tiny");
  c.residual_multiplier = 0.5;
  EXPECT_NE(error_of([&] { c.validate(); }).find("Granite's"), std::string::npos);
  c = read(granite_33_8b_instruct_json());
  c.qk_norm = true;
  EXPECT_NE(error_of([&] { c.validate(); }).find("Granite with"), std::string::npos);
}

}  // namespace
}  // namespace zt

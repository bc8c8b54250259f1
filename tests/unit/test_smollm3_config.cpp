// SmolLM3 (SmolLM3ForCausalLM): Llama's model in which the layers that config.json's
// no_rope_layers marks 0 (every fourth) take no RoPE. What SmolLM3Config (transformers 4.54)
// reads, with its own defaults where the published file leaves keys out (tied embeddings, the
// RoPE base, the padding row), what is refused, and what is written back. The model itself is
// checked against transformers in oracle_hf_smollm3, its decoding in KvCacheDecoder.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "support/error_text.h"

namespace zt {
namespace {

// A small SmolLM3Config as the published SmolLM3-3B writes it (no tie_word_embeddings key).
nlohmann::json smollm3_json() {
  return {{"architectures", {"SmolLM3ForCausalLM"}},
          {"model_type", "smollm3"},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 8},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 256},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 5000000.0},
          {"rope_scaling", nullptr},
          {"no_rope_layer_interval", 4},
          {"no_rope_layers", {1, 1, 1, 0, 1, 1, 1, 0}},
          {"use_sliding_window", false},
          {"sliding_window", nullptr},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"pad_token_id", 32}};
}

ModelConfig read(const nlohmann::json& j) {
  return ModelConfig::from_hf_json(j, "smollm3.json", UnknownConfigKeys::kRefuse);
}

std::string error_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = smollm3_json();
  j[key] = value;
  return error_of([&] { read(j); });
}

TEST(SmolLM3Config, NoRopeLayersAreReadWithTheFamilysDefaultsAndWrittenBack) {
  const ModelConfig c = read(smollm3_json());
  EXPECT_EQ(c.model_type(), "smollm3");
  EXPECT_EQ(c.layers_without_rope, (std::vector<int64_t>{3, 7}));
  EXPECT_FALSE(c.layer_rotates(3));
  EXPECT_TRUE(c.layer_rotates(4));
  // SmolLM3Config keeps PretrainedConfig's tie when the key is absent, as the published file
  // leaves it; Llama's reads absence as untied.
  EXPECT_TRUE(c.tie_word_embeddings);
  nlohmann::json as_llama = smollm3_json();
  as_llama.erase("no_rope_layers");
  as_llama.erase("no_rope_layer_interval");
  as_llama["model_type"] = "llama";
  as_llama["architectures"] = {"LlamaForCausalLM"};
  as_llama.erase("use_sliding_window");
  as_llama.erase("sliding_window");
  EXPECT_FALSE(read(as_llama).tie_word_embeddings);
  // Written back as SmolLM3, read back as the same model.
  const nlohmann::json back = c.to_hf_json();
  EXPECT_EQ(back.at("architectures"), nlohmann::json({"SmolLM3ForCausalLM"}));
  EXPECT_EQ(back.at("no_rope_layers"), nlohmann::json({1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(back.at("tie_word_embeddings"), true);
  EXPECT_EQ(ModelConfig::from_hf_json(back, "again"), c);
  // Every layer rotating is Llama's model, written as one.
  nlohmann::json all_rotate = smollm3_json();
  all_rotate["no_rope_layers"] = {1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(read(all_rotate).model_type(), "llama");
}

TEST(SmolLM3Config, AbsentKeysTakeSmolLM3ConfigsDefaults) {
  nlohmann::json j = smollm3_json();
  j.erase("no_rope_layers");  // every no_rope_layer_interval-th layer
  j.erase("rope_theta");      // SmolLM3Config's 2,000,000
  j.erase("pad_token_id");    // its 128004, beyond this vocabulary: refused as transformers fails
  EXPECT_NE(error_of([&] { read(j); }).find("SmolLM3Config's default 128004 is not a row"),
            std::string::npos);
  j["vocab_size"] = 128256;
  const ModelConfig c = read(j);
  EXPECT_EQ(c.layers_without_rope, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(c.rope_theta, 2000000.0);
  EXPECT_EQ(c.padding_token, 128004);
  // An absent num_key_value_heads is SmolLM3Config's 4 (Llama's: the query heads); null is the
  // query heads.
  j["num_attention_heads"] = 8;
  j.erase("num_key_value_heads");
  EXPECT_EQ(read(j).num_kv_heads, 4);
  j["num_key_value_heads"] = nullptr;
  EXPECT_EQ(read(j).num_kv_heads, 8);
  j["num_key_value_heads"] = 2;
  j["num_attention_heads"] = 4;
  j["no_rope_layer_interval"] = 3;
  EXPECT_EQ(read(j).layers_without_rope, (std::vector<int64_t>{2, 5}));
  j.erase("no_rope_layer_interval");  // 4 when absent too
  EXPECT_EQ(read(j).layers_without_rope, (std::vector<int64_t>{3, 7}));
  // No padding row is written as null, which SmolLM3Config would otherwise read as 128004.
  ModelConfig none = c;
  none.padding_token = -1;
  EXPECT_TRUE(none.to_hf_json().at("pad_token_id").is_null());
  EXPECT_EQ(ModelConfig::from_hf_json(none.to_hf_json(), "again"), none);
}

TEST(SmolLM3Config, WhatSmolLM3ComputesOtherwiseIsRefusedNamingTheKey) {
  EXPECT_NE(error_with("no_rope_layers", {1, 1, 0}).find("'no_rope_layers' must list a 1"),
            std::string::npos);
  EXPECT_NE(error_with("no_rope_layers", {1, 1, "0", 0, 1, 1, 1, 0}).find("entry 2 is \"0\""),
            std::string::npos);
  EXPECT_NE(error_with("no_rope_layers", "1110").find("'no_rope_layers'"), std::string::npos);
  nlohmann::json by_interval = smollm3_json();  // read only without no_rope_layers
  by_interval.erase("no_rope_layers");
  by_interval["no_rope_layer_interval"] = 0;
  EXPECT_NE(error_of([&] { read(by_interval); }).find("is 0"), std::string::npos);
  by_interval["no_rope_layer_interval"] = -4;  // Python's % gives 4's layers
  EXPECT_EQ(read(by_interval).layers_without_rope, (std::vector<int64_t>{3, 7}));
  EXPECT_NE(error_with("use_sliding_window", true).find("'use_sliding_window'"), std::string::npos);
  EXPECT_NE(error_with("layer_types", {"sliding_attention"}).find("'layer_types'"),
            std::string::npos);
  EXPECT_NE(error_with("partial_rotary_factor", 0.5).find("SmolLM3ForCausalLM"), std::string::npos);
  // Entries are read as Python's `if use_rope:` reads them: booleans, and any non-zero number.
  nlohmann::json truthy = smollm3_json();
  truthy["no_rope_layers"] = {true, 2, 1.0, false, 1, 1, 1, 0.0};
  EXPECT_EQ(read(truthy).layers_without_rope, (std::vector<int64_t>{3, 7}));
  // A longer list is read by layer index, as transformers reads it.
  nlohmann::json longer = smollm3_json();
  longer["no_rope_layers"] = {1, 1, 1, 0, 1, 1, 1, 0, 0, 0};
  EXPECT_EQ(read(longer).layers_without_rope, (std::vector<int64_t>{3, 7}));
  // The model itself: NoPE layers inside the model, only on Llama's attention.
  ModelConfig c = read(smollm3_json());
  c.layers_without_rope = {7, 3};
  EXPECT_NE(error_of([&] { c.validate(); }).find("ascending"), std::string::npos);
  c.layers_without_rope = {8};
  EXPECT_NE(error_of([&] { c.validate(); }).find("below 8"), std::string::npos);
  c.layers_without_rope = {3};
  c.qk_norm = true;
  EXPECT_NE(error_of([&] { c.validate(); }).find("not a Hugging Face architecture"),
            std::string::npos);
}

}  // namespace
}  // namespace zt

// OLMo 3 (Olmo3ForCausalLM, model_type "olmo3"): OLMo 2's model with a sliding window on all but
// every fourth layer, the windowed layers rotating with rope_theta unscaled and the others with
// the file's scaling (yarn in AllenAI's files). What Olmo3Config (transformers 4.57; 5.x's
// rope_parameters) reads from the published Olmo-3.1-32B-Instruct config.json (tests/data/
// hf_models), its defaults where a file leaves keys out, what is refused, and what is written
// back. The model is checked against transformers in oracle_hf_olmo3_yarn and
// oracle_hf_olmo3_bias_tied.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/layout.h"
#include "support/error_text.h"

namespace zt {
namespace {

nlohmann::json olmo3_32b_instruct_json() {
  std::ifstream in(std::string(ZT_SOURCE_DIR) +
                   "/tests/data/hf_models/allenai--Olmo-3.1-32B-Instruct/config.json");
  return nlohmann::json::parse(in);
}

ModelConfig read(const nlohmann::json& j) {
  return ModelConfig::from_hf_json(j, "olmo3.json", UnknownConfigKeys::kRefuse);
}

std::string error_of_json(const nlohmann::json& j) {
  return error_of([&] { read(j); });
}

std::string error_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = olmo3_32b_instruct_json();
  j[key] = value;
  return error_of_json(j);
}

TEST(Olmo3Config, Olmo31_32bInstructIsReadWithItsWindowsAndYarnOnTheFullLayers) {
  const ModelConfig c = read(olmo3_32b_instruct_json());
  EXPECT_EQ(c.model_type(), "olmo3");
  EXPECT_TRUE(c.is_olmo3() && c.is_olmo2() && c.sandwich_norms && c.qk_norm_spans_heads);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.sliding_window_pattern, 4);
  EXPECT_EQ(c.padding_token, 100277);
  EXPECT_EQ(c.max_positions(), 65536);
  // Layers 0-2 slide and rotate with rope_theta, unscaled; layer 3 attends over every key and
  // rotates with yarn (factor 8 on an original 8192, cos and sin times its attention_factor).
  for (int layer : {0, 1, 2, 60}) {
    EXPECT_EQ(c.layer_window(layer), 4096) << layer;
    const RopeSpec local = c.rope_for_layer(layer, 8192);
    EXPECT_EQ(local.theta, 500000.0f);
    EXPECT_EQ(local.scaling.type, RopeScaling::kNone);
  }
  for (int layer : {3, 7, 63}) {
    EXPECT_EQ(c.layer_window(layer), 0) << layer;
    const RopeSpec full = c.rope_for_layer(layer, 8192);
    EXPECT_EQ(full.scaling.type, RopeScaling::kYarn);
    EXPECT_EQ(full.scaling.factor, 8.0);
    EXPECT_EQ(full.scaling.original_max_positions, 8192);
    EXPECT_EQ(full.scaling.attention_factor, 1.2079441541679836);
    EXPECT_EQ(full.scaling.beta_fast, 32.0);
    EXPECT_EQ(full.scaling.beta_slow, 1.0);
  }
  // A window the keys fit in is no window.
  EXPECT_EQ(c.attention_scores(0, 4096).window, 0);
  EXPECT_EQ(c.attention_scores(0, 4097).window, 4096);
  EXPECT_EQ(c.attention_scores(3, 8192).window, 0);
  const nlohmann::json written = c.to_transformers_json();
  EXPECT_EQ(written.at("architectures"), nlohmann::json({"Olmo3ForCausalLM"}));
  EXPECT_EQ(written.at("layer_types"), olmo3_32b_instruct_json().at("layer_types"));
  EXPECT_EQ(written.at("sliding_window"), 4096);
  EXPECT_EQ(written.at("rope_scaling").at("rope_type"), "yarn");
  // Its attention_factor is yarn's default for factor 8, 0.1·ln 8 + 1, left implicit.
  EXPECT_EQ(1.2079441541679836, 0.1 * std::log(8.0) + 1.0);
  EXPECT_FALSE(written.at("rope_scaling").contains("attention_factor"));
  EXPECT_EQ(read(written), c);
  EXPECT_EQ(read(c.to_hf_json()), c);
}

// Absent keys take Olmo3Config's defaults: the window 4096 on all but every fourth layer,
// pad_token_id 1, the query heads for num_key_value_heads. A layer_types list of another period
// is read as it says and written back.
TEST(Olmo3Config, AbsentKeysTakeOlmo3ConfigsDefaultsAndLayerTypesAreReadAsListed) {
  nlohmann::json j = olmo3_32b_instruct_json();
  for (const char* key : {"layer_types", "sliding_window", "pad_token_id", "num_key_value_heads"})
    j.erase(key);
  const ModelConfig d = read(j);
  EXPECT_EQ(d, [] {
    ModelConfig c = read(olmo3_32b_instruct_json());
    c.padding_token = 1;
    c.num_kv_heads = c.num_heads;
    return c;
  }());
  // A null layer_types is Olmo3Config's default too.
  nlohmann::json null_types = olmo3_32b_instruct_json();
  null_types["layer_types"] = nullptr;
  EXPECT_EQ(read(null_types), read(olmo3_32b_instruct_json()));
  nlohmann::json every_other = olmo3_32b_instruct_json();
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < 64; ++l) types.push_back(l % 2 ? "full_attention" : "sliding_attention");
  every_other["layer_types"] = types;
  const ModelConfig two = read(every_other);
  EXPECT_EQ(two.sliding_window_pattern, 2);
  EXPECT_EQ(two.layer_window(2), 4096);
  EXPECT_EQ(two.layer_window(3), 0);
  EXPECT_EQ(two.to_hf_json().at("layer_types"), types);
  EXPECT_EQ(read(two.to_hf_json()), two);
  // attention_bias puts biases on all four projections; no padding token is written as null.
  j["attention_bias"] = true;
  j["pad_token_id"] = nullptr;
  const ModelConfig biased = read(j);
  EXPECT_TRUE(biased.qkv_bias && biased.o_bias);
  EXPECT_TRUE(biased.to_hf_json().at("pad_token_id").is_null());
  EXPECT_EQ(read(biased.to_hf_json()), biased);
}

// transformers 5 writes OLMo 3's rope_parameters as one object per layer type; it is the same
// model as rope_theta with rope_scaling. One object with a scaling for every layer type is read
// differently by transformers releases and refused.
TEST(Olmo3Config, TransformersFivesRopeParametersAreReadPerLayerType) {
  const nlohmann::json published = olmo3_32b_instruct_json();
  nlohmann::json yarn = published.at("rope_scaling");
  yarn["rope_theta"] = 500000;
  nlohmann::json five = published;
  five.erase("rope_scaling");
  five.erase("rope_theta");
  five["rope_parameters"] = {
      {"full_attention", yarn},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5e5}}}};
  EXPECT_EQ(read(five), read(published));
  nlohmann::json flat = five;
  flat["rope_parameters"] = yarn;
  EXPECT_NE(error_of_json(flat).find("read differently for OLMo 3"), std::string::npos);
  flat["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000}};
  EXPECT_EQ(read(flat).rope_scaling.type, RopeScaling::kNone);
  nlohmann::json local = five;
  local["rope_parameters"]["sliding_attention"]["rope_theta"] = 10000;
  EXPECT_NE(error_of_json(local).find("windowed layers rotate with rope_theta"), std::string::npos);
  local["rope_parameters"]["sliding_attention"] = yarn;
  EXPECT_NE(error_of_json(local).find("is not OLMo 3's"), std::string::npos);
  nlohmann::json partial = five;
  partial["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 0.5;
  EXPECT_NE(error_of_json(partial).find("'partial_rotary_factor' 0.5 is not implemented"),
            std::string::npos);
  partial["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(read(partial), read(published));
}

TEST(Olmo3Config, WhatOlmo3DoesNotComputeIsRefusedNamingTheKey) {
  nlohmann::json j = olmo3_32b_instruct_json();
  j.erase("rope_theta");
  EXPECT_NE(error_of_json(j).find("has no 'rope_theta'"), std::string::npos);
  EXPECT_NE(error_with("rope_theta", 0).find("rope_theta must be a positive finite number"),
            std::string::npos);
  EXPECT_NE(error_with("sliding_window", nullptr).find("'sliding_window' is null"),
            std::string::npos);
  EXPECT_NE(error_with("rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}})
                .find("OLMo 3's rope scaling is yarn"),
            std::string::npos);
  nlohmann::json types = olmo3_32b_instruct_json().at("layer_types");
  types[1] = "full_attention";
  EXPECT_NE(error_with("layer_types", types).find("'layer_types'"), std::string::npos);
  types[1] = "sliding_attention";
  types.erase(types.end() - 1);
  EXPECT_NE(error_with("layer_types", types).find("63 entries"), std::string::npos);
  EXPECT_NE(error_with("architectures", {"Olmo2ForCausalLM"}).find("'architectures'"),
            std::string::npos);
  EXPECT_NE(
      error_with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 8.0}, {"truncate", false}})
          .find("'truncate'"),
      std::string::npos);
}

}  // namespace
}  // namespace zt

// Gemma 3's text models (Gemma3ForCausalLM, model_type "gemma3_text"): Gemma 2's model with
// per-head q/k norms (scaling by 1 + weight), a sliding window on every layer but each
// sliding_window_pattern-th, and those windowed layers rotating with rope_local_base_freq. What
// Gemma3TextConfig (transformers 4.50) reads from the published gemma-3-1b-it and gemma-3-270m
// config.json files (tests/data/hf_models; 270m's states its layers as transformers 4.55 writes
// them, layer_types), its defaults where a file leaves keys out, what is refused, and what is
// written back. The model is checked against a transformers reference in oracle_hf_gemma3.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/hf_config_gemma.h"
#include "model/hf_multimodal_config.h"
#include "model/layout.h"
#include "support/hf_config_files.h"

namespace zt {
namespace {

const char* const kGemma3_1bIt = "resaved-transformers-4.52.4--google--gemma-3-1b-it";

ModelConfig read(const nlohmann::json& j) {
  return read_strict(j, "gemma3.json");
}

std::string error_with(const std::string& key, const nlohmann::json& value) {
  return error_with_key(published_config(kGemma3_1bIt), key, value, "gemma3.json");
}

TEST(Gemma3Config, Gemma3_1bItIsReadWithItsNormsWindowsAndTwoRopeBases) {
  const ModelConfig c = read(published_config(kGemma3_1bIt));
  EXPECT_EQ(c.model_type(), "gemma3_text");
  EXPECT_TRUE(c.is_gemma() && c.sandwich_norms && c.qk_norm && c.is_gemma3());
  EXPECT_EQ(c.attention_scores().scale, 0.0625f);  // 256^−½
  EXPECT_EQ(c.attention_scores().softcap, 0.0f);   // null: none
  EXPECT_EQ(c.final_logit_softcap, 0.0f);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.sliding_window_pattern, 6);
  // Layers 5, 11, 17 and 23 attend over every key and rotate with rope_theta; the others within
  // 512 keys (at 32768 positions), rotating with rope_local_base_freq.
  for (int layer = 0; layer < 26; ++layer) {
    const bool global = (layer + 1) % 6 == 0;
    EXPECT_EQ(c.attention_scores(layer, 32768).window, global ? 0 : 512) << layer;
    EXPECT_EQ(c.rope_for_layer(layer, 32768).theta, global ? 1000000.0f : 10000.0f) << layer;
  }
  EXPECT_EQ(c.attention_scores(0, 512).window, 0);  // the keys fit in the window
  // Qwen3's tensor names for the q/k norms beside Gemma 2's four norms.
  const ParamLayout layout(c);
  EXPECT_EQ(layout.tensor(TensorRole::kQNorm, 3).name, "model.layers.3.self_attn.q_norm.weight");
  EXPECT_EQ(layout.tensor(TensorRole::kKNorm, 3).name, "model.layers.3.self_attn.k_norm.weight");
  EXPECT_EQ(layout.tensor(TensorRole::kMlpOutNorm, 3).name,
            "model.layers.3.post_feedforward_layernorm.weight");
  const nlohmann::json written = c.to_hf_json();
  EXPECT_EQ(written.at("architectures"), nlohmann::json({"Gemma3ForCausalLM"}));
  EXPECT_EQ(written.at("model_type"), "gemma3_text");
  EXPECT_EQ(written.at("sliding_window_pattern"), 6);
  EXPECT_EQ(written.at("rope_local_base_freq"), 10000.0);
  EXPECT_EQ(written.at("sliding_window"), 512);
  EXPECT_EQ(written.at("query_pre_attn_scalar"), 256.0);
  EXPECT_TRUE(written.at("attn_logit_softcapping").is_null());
  EXPECT_EQ(read(written), c);
}

// gemma-3-270m's file states its layers as transformers 4.55 writes them (layer_types, with
// _sliding_window_pattern beside): the same pattern of every sixth layer.
TEST(Gemma3Config, LayerTypesOfNewerReSavesAreThePattern) {
  const ModelConfig c = read(published_config("google--gemma-3-270m"));
  EXPECT_EQ(c.sliding_window_pattern, 6);
  EXPECT_EQ(c.num_layers, 18);
  EXPECT_EQ(c.attention_scores(17, 4096).window, 0);
  EXPECT_EQ(c.attention_scores(16, 4096).window, 512);
  // layer_types wins over the pattern key, as transformers 4.53 and later read it.
  nlohmann::json j = published_config(kGemma3_1bIt);
  j["layer_types"] = nlohmann::json::array();
  for (int l = 0; l < 26; ++l)
    j["layer_types"].push_back((l + 1) % 3 == 0 ? "full_attention" : "sliding_attention");
  EXPECT_EQ(read(j).sliding_window_pattern, 3);
  // _sliding_window_pattern, which those releases write and do not read, changes nothing.
  nlohmann::json unread = published_config(kGemma3_1bIt);
  unread.erase("sliding_window_pattern");
  unread["_sliding_window_pattern"] = 3;
  EXPECT_EQ(read(unread).sliding_window_pattern, 6);
}

// Absent keys take Gemma3TextConfig's defaults (4.50), the values a file that states them says:
// query_pre_attn_scalar 256, no caps, window 4096, pattern 6, local base 10000, rope_theta 1e6,
// 4 kv heads, head_dim 256, tied.
TEST(Gemma3Config, AbsentKeysTakeGemma3TextConfigsDefaults) {
  const nlohmann::json defaults = {{"query_pre_attn_scalar", 256},
                                   {"attn_logit_softcapping", nullptr},
                                   {"final_logit_softcapping", nullptr},
                                   {"sliding_window", 4096},
                                   {"sliding_window_pattern", 6},
                                   {"rope_local_base_freq", 10000.0},
                                   {"rope_theta", 1000000.0},
                                   {"num_key_value_heads", 4},
                                   {"head_dim", 256},
                                   {"tie_word_embeddings", true}};
  nlohmann::json absent = published_config(kGemma3_1bIt), stated = absent;
  for (const auto& [key, value] : defaults.items()) {
    absent.erase(key);
    stated[key] = value;
  }
  const ModelConfig c = read(absent);
  EXPECT_EQ(c, read(stated));
  EXPECT_EQ(c.num_kv_heads, 4);       // not 1b's 1
  EXPECT_EQ(c.sliding_window, 4096);  // not 1b's 512
  EXPECT_TRUE(c.tie_word_embeddings);
}

// gemma-3-4b's text model scales its full-attention layers' RoPE linearly (factor 8); the local
// layers' base is never scaled.
TEST(Gemma3Config, LinearRopeScalingIsTheFullAttentionLayers) {
  nlohmann::json j = published_config(kGemma3_1bIt);
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  const ModelConfig c = read(j);
  EXPECT_EQ(c.rope_for_layer(5, 4096).scaling.type, RopeScaling::kLinear);
  EXPECT_EQ(c.rope_for_layer(5, 4096).scaling.factor, 8.0);
  EXPECT_EQ(c.rope_for_layer(4, 4096).scaling.type, RopeScaling::kNone);
  EXPECT_EQ(read(c.to_hf_json()), c);
}

// transformers 5 writes the RoPE of each layer type in rope_parameters (and no rope_theta or
// rope_local_base_freq): the same model as 4.x's keys say.
TEST(Gemma3Config, Transformers5RopeParametersPerLayerTypeAreTheTwoBases) {
  nlohmann::json v4 = published_config(kGemma3_1bIt);
  v4["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  v4["rope_local_base_freq"] = 20000.0;  // not the default: the object must be read
  nlohmann::json v5 = v4;
  for (const char* key : {"rope_theta", "rope_local_base_freq", "rope_scaling"}) v5.erase(key);
  v5["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1000000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}}};
  EXPECT_EQ(read(v5), read(v4));
  // Both spellings in one file must agree; a sliding scaling or another key is refused.
  nlohmann::json both = v5;
  both["rope_local_base_freq"] = 30000.0;
  EXPECT_NE(error_of([&] { read(both); }).find("differs from 'rope_local_base_freq'"),
            std::string::npos);
  nlohmann::json scaled = v5;
  scaled["rope_parameters"]["sliding_attention"] = {
      {"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 20000.0}};
  EXPECT_NE(error_of([&] { read(scaled); }).find("sliding_attention"), std::string::npos);
  nlohmann::json extra = v5;
  extra["rope_parameters"]["chunked_attention"] = {{"rope_type", "default"}};
  EXPECT_NE(error_of([&] { read(extra); }).find("unknown key 'chunked_attention'"),
            std::string::npos);
  // The per-layer-type form outside Gemma 3 is refused naming it.
  nlohmann::json llama = preset_config("tiny").to_hf_json();
  llama.erase("rope_theta");
  llama["rope_parameters"] = v5["rope_parameters"];
  EXPECT_NE(error_of([&] { read_strict(llama, "l.json"); }).find("one object per layer type"),
            std::string::npos);
}

// gemma-3-4b's multimodal config.json states its text model sparsely, as Gemma3Config writes it
// (the shape of google/gemma-3-4b-it's file, its vision tower's keys left out here): the text
// model takes Gemma3TextConfig's defaults for the rest: 8 heads of 256, 4 kv heads, a vocabulary
// of 262208, 3,880,263,168 parameters, its full-attention layers' RoPE linearly scaled by 8.
TEST(Gemma3Config, AMultimodalConfigsTextModelTakesGemma3TextConfigsDefaults) {
  const nlohmann::json multimodal = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                     {"model_type", "gemma3"},
                                     {"boi_token_index", 255999},
                                     {"eoi_token_index", 256000},
                                     {"image_token_index", 262144},
                                     {"mm_tokens_per_image", 256},
                                     {"text_config",
                                      {{"hidden_size", 2560},
                                       {"intermediate_size", 10240},
                                       {"model_type", "gemma3_text"},
                                       {"num_hidden_layers", 34},
                                       {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                                       {"sliding_window", 1024}}},
                                     {"vision_config", {{"model_type", "siglip_vision_model"}}}};
  const MultimodalWrapper* wrapper = multimodal_wrapper(multimodal);
  ASSERT_TRUE(wrapper != nullptr);
  EXPECT_EQ(std::string(wrapper->model_type), "gemma3");
  EXPECT_EQ(multimodal_wrapper(published_config(kGemma3_1bIt)), nullptr);
  const ModelConfig c = read(multimodal_text_config(multimodal, *wrapper, "mm.json"));
  EXPECT_EQ(c.model_type(), "gemma3_text");
  EXPECT_EQ(ParamLayout(c).total_numel(), 3880263168);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.rope_for_layer(5, 4096).scaling.factor, 8.0);
  EXPECT_EQ(c.rope_for_layer(4, 4096).scaling.type, RopeScaling::kNone);
  nlohmann::json without = multimodal;
  without.erase("text_config");
  EXPECT_NE(
      error_of([&] { multimodal_text_config(without, *wrapper, "mm.json"); }).find("'text_config'"),
      std::string::npos);
  nlohmann::json other = multimodal;
  other["text_config"]["model_type"] = "gemma2";
  EXPECT_NE(error_of([&] {
              multimodal_text_config(other, *wrapper, "mm.json");
            }).find("not \"gemma3_text\""),
            std::string::npos);
}

TEST(Gemma3Config, WhatGemma3DoesNotComputeIsRefusedNamingTheKey) {
  EXPECT_NE(error_with("sliding_window", nullptr).find("'sliding_window' is null"),
            std::string::npos);
  EXPECT_NE(error_with("query_pre_attn_scalar", nullptr).find("'query_pre_attn_scalar' is null"),
            std::string::npos);
  EXPECT_NE(error_with("rope_local_base_freq", nullptr).find("'rope_local_base_freq' is null"),
            std::string::npos);
  EXPECT_NE(error_with("rope_local_base_freq", -1).find("'rope_local_base_freq'"),
            std::string::npos);
  EXPECT_NE(error_with("sliding_window_pattern", 0).find("'sliding_window_pattern'"),
            std::string::npos);
  EXPECT_NE(error_with("sliding_window_pattern", "6").find("'sliding_window_pattern'"),
            std::string::npos);
  EXPECT_NE(error_with("hidden_activation", nullptr).find("'hidden_activation' is null"),
            std::string::npos);
  // transformers' Gemma 3 passes no cap to its attention: a file's cap is refused, not applied.
  EXPECT_NE(error_with("attn_logit_softcapping", 50.0)
                .find("'attn_logit_softcapping' 50.0 is not applied by transformers' Gemma 3"),
            std::string::npos);
  nlohmann::json odd = nlohmann::json::array();
  for (int l = 0; l < 26; ++l) odd.push_back(l == 3 ? "full_attention" : "sliding_attention");
  EXPECT_NE(error_with("layer_types", odd).find("'layer_types'"), std::string::npos);
  EXPECT_NE(
      error_with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}).find("'rope_scaling'"),
      std::string::npos);
  EXPECT_NE(error_with("use_bidirectional_attention", true).find("'use_bidirectional_attention'"),
            std::string::npos);
  // A Gemma 3 config.json read as another family's keys: architectures must name Gemma3.
  EXPECT_NE(error_with("architectures", {"Gemma2ForCausalLM"}).find("'architectures'"),
            std::string::npos);
}

}  // namespace
}  // namespace zt

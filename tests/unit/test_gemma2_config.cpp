// Gemma 2 (Gemma2ForCausalLM, model_type "gemma2"): Gemma's model with a norm on the attention's
// and the MLP's outputs (sandwich norms), scores scaled by query_pre_attn_scalar^−½ and
// soft-capped, and soft-capped logits. What Gemma2Config (transformers 4.46) reads from the
// published gemma-2-9b-it config.json (tests/data/hf_models), its defaults where a file leaves keys
// out, what is refused, and what is written back. The model is checked against transformers in
// oracle_hf_gemma2.
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

nlohmann::json gemma2_9b_it_json() {
  std::ifstream in(std::string(ZT_SOURCE_DIR) +
                   "/tests/data/hf_models/google--gemma-2-9b-it/config.json");
  return nlohmann::json::parse(in);
}

ModelConfig read(const nlohmann::json& j) {
  return ModelConfig::from_hf_json(j, "gemma2.json", UnknownConfigKeys::kRefuse);
}

std::string error_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = gemma2_9b_it_json();
  j[key] = value;
  return error_of([&] { read(j); });
}

TEST(Gemma2Config, Gemma2_9bItIsReadWithItsScaleCapsWindowAndNorms) {
  const ModelConfig c = read(gemma2_9b_it_json());
  EXPECT_EQ(c.model_type(), "gemma2");
  EXPECT_TRUE(c.is_gemma() && c.sandwich_norms && c.scaled_embeddings);
  EXPECT_EQ(c.attention_scores().scale, 0.0625f);  // 256^−½
  EXPECT_EQ(c.attention_scores().softcap, 50.0f);
  EXPECT_EQ(c.final_logit_softcap, 30.0f);
  EXPECT_EQ(c.sliding_window, 4096);
  // The window is the even layers' (transformers' is_sliding = not layer_idx % 2), where it masks
  // keys: at 8192 positions (max_position_embeddings), not at 4096.
  EXPECT_EQ(c.attention_scores(0, 8192).window, 4096);
  EXPECT_EQ(c.attention_scores(40, 8192).window, 4096);
  EXPECT_EQ(c.attention_scores(41, 8192).window, 0);
  EXPECT_EQ(c.attention_scores(0, 4096).window, 0);
  EXPECT_TRUE(c.tie_word_embeddings);  // Gemma2Config's default: the file has no key
  // Gemma 2's names: post_attention_layernorm follows the attention, pre_feedforward_layernorm
  // precedes the MLP.
  const ParamLayout layout(c);
  EXPECT_EQ(layout.tensor(TensorRole::kAttnOutNorm, 3).name,
            "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(layout.tensor(TensorRole::kPostAttnNorm, 3).name,
            "model.layers.3.pre_feedforward_layernorm.weight");
  EXPECT_EQ(layout.tensor(TensorRole::kMlpOutNorm, 3).name,
            "model.layers.3.post_feedforward_layernorm.weight");
  const nlohmann::json written = c.to_hf_json();
  EXPECT_EQ(written.at("architectures"), nlohmann::json({"Gemma2ForCausalLM"}));
  EXPECT_EQ(written.at("query_pre_attn_scalar"), 256.0);
  EXPECT_EQ(written.at("attn_logit_softcapping"), 50.0);
  EXPECT_EQ(written.at("final_logit_softcapping"), 30.0);
  EXPECT_EQ(written.at("sliding_window"), 4096);
  EXPECT_EQ(written.at("hidden_activation"), "gelu_pytorch_tanh");
  EXPECT_EQ(read(written), c);
}

// Absent keys take Gemma2Config's defaults (query_pre_attn_scalar 224, caps 50 and 30, window
// 4096); null caps are none, written back as null. transformers 4.53 and later write layer_types,
// Gemma 2's alternating windowed and full layers, and 4.56 use_bidirectional_attention false.
TEST(Gemma2Config, AbsentKeysTakeGemma2ConfigsDefaultsNullIsNone) {
  nlohmann::json j = gemma2_9b_it_json();
  for (const char* key : {"query_pre_attn_scalar", "attn_logit_softcapping",
                          "final_logit_softcapping", "sliding_window", "sliding_window_size"})
    j.erase(key);
  const ModelConfig d = read(j);
  EXPECT_EQ(d.query_pre_attn_scalar, 224.0);
  EXPECT_EQ(d.attention_scores().scale, static_cast<float>(std::pow(224.0, -0.5)));
  EXPECT_EQ(d.attn_logit_softcap, 50.0f);
  EXPECT_EQ(d.final_logit_softcap, 30.0f);
  EXPECT_EQ(d.sliding_window, 4096);
  j["attn_logit_softcapping"] = j["final_logit_softcapping"] = nullptr;
  const ModelConfig none = read(j);
  EXPECT_EQ(none.attention_scores().softcap, 0.0f);
  EXPECT_EQ(none.final_logit_softcap, 0.0f);
  const nlohmann::json written = none.to_hf_json();
  EXPECT_TRUE(written.at("attn_logit_softcapping").is_null());
  EXPECT_TRUE(written.at("final_logit_softcapping").is_null());
  EXPECT_EQ(read(written), none);
  nlohmann::json resaved = gemma2_9b_it_json();
  resaved["layer_types"] = nlohmann::json::array();
  for (int l = 0; l < 42; ++l)
    resaved["layer_types"].push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  resaved["use_bidirectional_attention"] = false;
  EXPECT_EQ(read(resaved), read(gemma2_9b_it_json()));
}

TEST(Gemma2Config, WhatGemma2DoesNotComputeIsRefusedNamingTheKey) {
  EXPECT_NE(error_with("query_pre_attn_scalar", nullptr).find("'query_pre_attn_scalar' is null"),
            std::string::npos);
  EXPECT_NE(
      error_with("attn_logit_softcapping", -1.0)
          .find("'attn_logit_softcapping' must be a positive number (finite in fp32) or null"),
      std::string::npos);
  EXPECT_NE(error_with("final_logit_softcapping", "30")
                .find("'final_logit_softcapping' must be a positive number"),
            std::string::npos);
  // 1e-50 is 0 in fp32, where the cap is applied: no cap, which the file does not say.
  EXPECT_NE(error_with("final_logit_softcapping", 1e-50)
                .find("'final_logit_softcapping' must be a positive number (finite in fp32)"),
            std::string::npos);
  EXPECT_NE(error_with("query_pre_attn_scalar", 1e-90).find("no finite fp32 scale"),
            std::string::npos);
  EXPECT_NE(error_with("sliding_window", nullptr).find("'sliding_window' is null"),
            std::string::npos);
  EXPECT_NE(
      error_with("layer_types", {"sliding_attention", "chunked_attention"}).find("'layer_types'"),
      std::string::npos);
  // A re-save's layer_types that is not Gemma 2's alternation (which transformers 4.53 and later
  // would compute): all full, or the odd layers sliding.
  for (const bool odd_slide : {false, true}) {
    nlohmann::json types = nlohmann::json::array();
    for (int l = 0; l < 42; ++l)
      types.push_back(odd_slide && l % 2 == 1 ? "sliding_attention" : "full_attention");
    EXPECT_NE(error_with("layer_types", types).find("'layer_types'"), std::string::npos)
        << types.dump();
  }
  EXPECT_NE(error_with("use_bidirectional_attention", true).find("'use_bidirectional_attention'"),
            std::string::npos);
  EXPECT_NE(error_with("hidden_activation", nullptr).find("'hidden_activation' is null"),
            std::string::npos);
  EXPECT_NE(error_with("hidden_activation", "gelu").find("'hidden_activation': \"gelu\""),
            std::string::npos);
  EXPECT_NE(error_with("rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}})
                .find("not applied by transformers' Gemma and Gemma 2"),
            std::string::npos);
  EXPECT_NE(error_with("architectures", {"GemmaForCausalLM"}).find("'architectures'"),
            std::string::npos);
  // Gemma 2's parts come with Gemma's: sandwich norms on a Llama, or a scale without them, are no
  // Hugging Face architecture.
  ModelConfig part = read(gemma2_9b_it_json());
  part.norm_weight_offset = 0.0f;
  part.scaled_embeddings = false;
  part.mlp_activation = GluActivation::kSilu;
  EXPECT_NE(error_of([&] { part.validate(); }).find("Gemma 2's"), std::string::npos);
  ModelConfig scale_only = preset_config("tiny");
  scale_only.query_pre_attn_scalar = 16;
  EXPECT_NE(error_of([&] { scale_only.validate(); }).find("Gemma 2's"), std::string::npos);
}

}  // namespace
}  // namespace zt

// Ministral 3 (Mistral3ForConditionalGeneration wrapping a "ministral3" text model): what its
// config yields, against a user's copy of the Ministral-3-8B-Instruct-2512 config
// (tests/data/hf_models/SOURCES.md), Ministral3Config's defaults, the config.json zerotrain writes
// back (transformers 5's rope_parameters alone) and what is refused. The model itself is checked
// against transformers in oracle_hf_ministral3 (and _multimodal).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/hf_multimodal_config.h"
#include "model/layout.h"
#include "support/error_text.h"
#include "support/hf_config_files.h"

namespace zt {
namespace {

const char* const kMinistral8b = "third-party-copy--mistralai--Ministral-3-8B-Instruct-2512";

nlohmann::json text_config(const nlohmann::json& wrapped) {
  return multimodal_text_config(wrapped, *multimodal_wrapper(wrapped), "config.json");
}

TEST(Ministral3Config, TheWrapperYieldsItsMinistral3TextModel) {
  const nlohmann::json text = text_config(published_config(kMinistral8b));
  EXPECT_EQ(text.at("architectures"), nlohmann::json::array({"Ministral3ForCausalLM"}));
  const ModelConfig c = read_strict(text, "config.json");
  EXPECT_EQ(c.model_type(), "ministral3");
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.padding_token, 11);  // Ministral3Config's pad_token_id, absent from the file
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kYarn);
  EXPECT_EQ(c.rope_scaling.factor, 16.0);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 16384);
  EXPECT_EQ(c.rope_scaling.attention_factor, 1.0);  // mscale / mscale_all_dim, both 1
  EXPECT_EQ(c.llama4_scaling_beta, 0.1);
  EXPECT_EQ(c.llama4_scaling_positions, 16384);
  // Past 16384 positions transformers scales the queries: the longest sequence taken.
  EXPECT_EQ(c.max_positions(), 16384);
  EXPECT_NE(c.max_positions_text().find("Ministral 3's original_max_position_embeddings, 16384"),
            std::string::npos);
  // Without a scale (β 0) the queries are never scaled: yarn's 16 × 16384.
  nlohmann::json unscaled = text;
  unscaled["rope_parameters"]["llama_4_scaling_beta"] = 0.0;
  EXPECT_EQ(read_strict(unscaled, "u.json").max_positions(), 262144);
}

TEST(Ministral3Config, AnEmptyTextConfigIsMinistral3ConfigsDefaults) {
  nlohmann::json wrapped = published_config(kMinistral8b);
  wrapped["text_config"] = {{"model_type", "ministral3"}};
  const ModelConfig c = read_strict(text_config(wrapped), "config.json");
  // The 8B's shape, and the default rope_parameters: yarn 16 over 16384, β 0.1.
  EXPECT_EQ(ParamLayout(c).total_numel(), 8489553920);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kYarn);
  EXPECT_EQ(c.rope_scaling.attention_factor, 1.0);
  EXPECT_EQ(c.llama4_scaling_beta, 0.1);
  // The 3B's width: an absent head_dim is 128 (not 3072 / 32), a null one the quotient.
  wrapped["text_config"]["hidden_size"] = 3072;
  EXPECT_EQ(read_strict(text_config(wrapped), "config.json").head_dim(), 128);
  wrapped["text_config"]["head_dim"] = nullptr;
  EXPECT_EQ(read_strict(text_config(wrapped), "config.json").head_dim(), 96);
}

TEST(Ministral3Config, WhatItWritesReadsBackAsTheSameModel) {
  const ModelConfig c = read_strict(text_config(published_config(kMinistral8b)), "config.json");
  const nlohmann::json written = c.to_transformers_json();
  EXPECT_EQ(written.at("model_type"), "ministral3");
  EXPECT_EQ(written.at("architectures"), nlohmann::json::array({"Ministral3ForCausalLM"}));
  // rope_parameters alone, as Ministral3Config writes them, with the scale.
  EXPECT_FALSE(written.contains("rope_scaling"));
  EXPECT_FALSE(written.contains("rope_theta"));
  const nlohmann::json& rope = written.at("rope_parameters");
  EXPECT_EQ(rope.at("rope_type"), "yarn");
  EXPECT_EQ(rope.at("rope_theta"), 1e6);
  EXPECT_EQ(rope.at("llama_4_scaling_beta"), 0.1);
  EXPECT_EQ(rope.at("original_max_position_embeddings"), 16384);
  EXPECT_EQ(rope.at("attention_factor"), 1.0);
  EXPECT_EQ(written.at("head_dim"), 128);
  EXPECT_EQ(written.at("sliding_window"), nullptr);
  EXPECT_EQ(written.at("pad_token_id"), 11);
  const ModelConfig back = read_strict(written, "written.json");
  EXPECT_EQ(back.to_hf_json(), c.to_hf_json());
  EXPECT_EQ(back.max_positions(), 16384);
  // A window, when one is given, is kept with the scaling.
  nlohmann::json windowed = written;
  windowed["sliding_window"] = 4096;
  EXPECT_EQ(read_strict(windowed, "w.json").sliding_window, 4096);
  EXPECT_EQ(read_strict(windowed, "w.json").to_hf_json().at("sliding_window"), 4096);
}

TEST(Ministral3Config, WhatTransformersWouldNotComputeIsRefused) {
  const nlohmann::json text = text_config(published_config(kMinistral8b));
  const auto refused = [&](const nlohmann::json& j) {
    return error_of([&] { read_strict(j, "m.json"); });
  };
  nlohmann::json no_beta = text;
  no_beta["rope_parameters"].erase("llama_4_scaling_beta");
  EXPECT_NE(refused(no_beta).find("has no 'llama_4_scaling_beta'"), std::string::npos)
      << refused(no_beta);
  nlohmann::json negative = text;
  negative["rope_parameters"]["llama_4_scaling_beta"] = -0.1;
  EXPECT_NE(refused(negative).find("'llama_4_scaling_beta' must be a finite number"),
            std::string::npos);
  nlohmann::json other_length = text;
  other_length["rope_parameters"]["max_position_embeddings"] = 131072;
  EXPECT_NE(refused(other_length).find("'max_position_embeddings' 131072 differs"),
            std::string::npos);
  nlohmann::json theta_alone = text;
  theta_alone.erase("rope_parameters");
  theta_alone["rope_theta"] = 1e6;
  EXPECT_NE(refused(theta_alone).find("'rope_theta' and no 'rope_parameters'"), std::string::npos)
      << refused(theta_alone);
  nlohmann::json biased = text;
  biased["attention_bias"] = true;
  EXPECT_NE(refused(biased).find("'attention_bias'"), std::string::npos);
  nlohmann::json unknown = text;
  unknown["rope_parameters"]["llama_4_scaling_offset"] = 1;
  EXPECT_NE(refused(unknown).find("unknown key 'llama_4_scaling_offset'"), std::string::npos);
  // The key belongs to Ministral 3: a Mistral's rope object may not hold it.
  nlohmann::json mistral = text;
  mistral["model_type"] = "mistral";
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["sliding_window"] = nullptr;
  mistral["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e6}, {"llama_4_scaling_beta", 0.1}};
  EXPECT_NE(refused(mistral).find("unknown key 'llama_4_scaling_beta'"), std::string::npos)
      << refused(mistral);
  // Whatever the rope type and β, transformers divides by the original length: required, and
  // read beside a default rotation.
  nlohmann::json unrotated = text;
  unrotated["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e6}, {"llama_4_scaling_beta", 0.0}};
  EXPECT_NE(refused(unrotated).find("has no 'original_max_position_embeddings'"), std::string::npos)
      << refused(unrotated);
  unrotated["rope_parameters"]["original_max_position_embeddings"] = 8192;
  unrotated["rope_parameters"]["llama_4_scaling_beta"] = 0.1;
  EXPECT_EQ(read_strict(unrotated, "d.json").max_positions(), 8192);
  EXPECT_EQ(read_strict(unrotated, "d.json").to_hf_json().at("rope_parameters"),
            unrotated["rope_parameters"]);
  // Another text model inside Mistral3ForConditionalGeneration names both it reads.
  nlohmann::json wrapped = published_config(kMinistral8b);
  wrapped["text_config"]["model_type"] = "ministral";
  EXPECT_NE(error_of([&] { text_config(wrapped); }).find("not \"mistral\" or \"ministral3\""),
            std::string::npos)
      << error_of([&] { text_config(wrapped); });
}

}  // namespace
}  // namespace zt

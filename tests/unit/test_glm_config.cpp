// GLM (GlmForCausalLM, model_type "glm"; Glm4ForCausalLM, "glm4"): Llama's model whose RoPE pairs
// adjacent elements of each head's leading int(head_dim · partial_rotary_factor), whose checkpoint
// fuses gate/up into mlp.gate_up_proj, with q/k/v biases (attention_bias, true by default); GLM-4
// adds norms on the attention's and the MLP's outputs. What GlmConfig and Glm4Config (transformers
// 4.49, 4.57) read from the published GLM-4-9B-Chat config.json (tests/data/hf_models), their
// defaults where a file leaves keys out, what is refused, and what is written back. The model is
// checked against transformers in the oracle_hf_glm* tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/hf_checkpoint_tensors.h"
#include "model/layout.h"
#include "support/error_text.h"

namespace zt {
namespace {

nlohmann::json glm4_9b_chat_json() {
  std::ifstream in(std::string(ZT_SOURCE_DIR) +
                   "/tests/data/hf_models/THUDM--glm-4-9b-chat-rev-9918c3f/config.json");
  return nlohmann::json::parse(in);
}

// GLM-4-32B-0414's shape as its fine-tunes' config.json files state it (no published file of
// the 0414 models was at hand): Glm4ForCausalLM, no attention biases, 61 layers.
nlohmann::json glm4_32b_0414_shape() {
  return {{"architectures", {"Glm4ForCausalLM"}},
          {"model_type", "glm4"},
          {"attention_bias", false},
          {"head_dim", 128},
          {"hidden_size", 6144},
          {"intermediate_size", 23040},
          {"max_position_embeddings", 32768},
          {"num_attention_heads", 48},
          {"num_hidden_layers", 61},
          {"num_key_value_heads", 2},
          {"pad_token_id", 151329},
          {"partial_rotary_factor", 0.5},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", false},
          {"vocab_size", 151552}};
}

ModelConfig read(const nlohmann::json& j) {
  return ModelConfig::from_hf_json(j, "glm.json", UnknownConfigKeys::kRefuse);
}

std::string error_with(nlohmann::json j, const std::string& key, const nlohmann::json& value) {
  j[key] = value;
  return error_of([&] { read(j); });
}

TEST(GlmConfig, Glm4_9bChatIsReadWithHalfOfEachHeadRotatedInAdjacentPairs) {
  const ModelConfig c = read(glm4_9b_chat_json());
  EXPECT_EQ(c.model_type(), "glm");
  EXPECT_TRUE(c.is_glm() && c.interleaved_rope && c.fused_gate_up && c.qkv_bias);
  EXPECT_FALSE(c.o_bias || c.sandwich_norms || c.fused_projections || c.qk_norm);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.rotary_dims(), 64);  // no partial_rotary_factor in the file: GlmConfig's 0.5
  const RopeSpec rope = c.rope_for_layer(0, 4096);
  EXPECT_TRUE(rope.interleaved);
  EXPECT_EQ(rope.rotary_dims, 64);
  EXPECT_EQ(c.padding_token, 151329);
  // gate and up are one tensor in the checkpoint, q, k and v are three.
  const std::vector<HfCheckpointTensor> stored = hf_checkpoint_tensors(ParamLayout(c));
  auto stored_shape = [&](const std::string& name) {
    for (const HfCheckpointTensor& t : stored)
      if (t.name == name) return t.shape;
    return std::vector<int64_t>{};
  };
  EXPECT_EQ(stored_shape("model.layers.0.mlp.gate_up_proj.weight"),
            (std::vector<int64_t>{2 * 13696, 4096}));
  EXPECT_EQ(stored_shape("model.layers.0.self_attn.k_proj.weight"),
            (std::vector<int64_t>{256, 4096}));
  EXPECT_EQ(stored_shape("model.layers.0.self_attn.k_proj.bias"), (std::vector<int64_t>{256}));
  EXPECT_TRUE(stored_shape("model.layers.0.mlp.gate_proj.weight").empty());
  EXPECT_TRUE(stored_shape("model.layers.0.self_attn.o_proj.bias").empty());
  // Written back as GlmConfig reads it: the biases, the factor and the head size said.
  const nlohmann::json written = c.to_hf_json();
  EXPECT_EQ(written.at("architectures"), nlohmann::json({"GlmForCausalLM"}));
  EXPECT_EQ(written.at("attention_bias"), true);
  EXPECT_EQ(written.at("partial_rotary_factor"), 0.5);
  EXPECT_EQ(written.at("head_dim"), 128);
  EXPECT_EQ(read(written), c);
}

TEST(GlmConfig, Glm4AddsNormsOnTheOutputsUnderItsOwnNames) {
  const ModelConfig c = read(glm4_32b_0414_shape());
  EXPECT_EQ(c.model_type(), "glm4");
  EXPECT_TRUE(c.is_glm() && c.sandwich_norms && c.pre_norms);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.is_gemma());
  EXPECT_EQ(c.norm_weight_offset, 0.0f);  // Llama's norms: times the weight
  // 32,566,081,536 parameters from these shapes: GLM-4-32B.
  const ParamLayout layout(c);
  EXPECT_EQ(layout.total_numel(), 32566081536);
  std::vector<std::string> norms;
  for (const TensorInfo& t : layout.tensors())
    if (t.layer == 0 && t.name.find("norm") != std::string::npos) norms.push_back(t.name);
  const std::string l = "model.layers.0.";
  EXPECT_EQ(norms, (std::vector<std::string>{
                       l + "input_layernorm.weight", l + "post_self_attn_layernorm.weight",
                       l + "post_attention_layernorm.weight", l + "post_mlp_layernorm.weight"}));
  // The one before the MLP is post_attention_layernorm, as Llama's; the others norm the outputs.
  for (const TensorInfo& t : layout.tensors()) {
    if (t.name == l + "post_attention_layernorm.weight") {
      EXPECT_EQ(t.role, TensorRole::kPostAttnNorm);
    } else if (t.name == l + "post_self_attn_layernorm.weight") {
      EXPECT_EQ(t.role, TensorRole::kAttnOutNorm);
    } else if (t.name == l + "post_mlp_layernorm.weight") {
      EXPECT_EQ(t.role, TensorRole::kMlpOutNorm);
    }
  }
  EXPECT_EQ(read(c.to_hf_json()), c);
}

TEST(GlmConfig, DefaultsAreGlmConfigs) {
  nlohmann::json j = glm4_32b_0414_shape();
  for (const char* key : {"attention_bias", "head_dim", "partial_rotary_factor", "pad_token_id",
                          "num_key_value_heads"})
    j.erase(key);
  const ModelConfig c = read(j);
  EXPECT_TRUE(c.qkv_bias);         // attention_bias true
  EXPECT_EQ(c.head_dim(), 128);    // (6144 / 48 is 128 too: the lines below tell them apart)
  EXPECT_EQ(c.rotary_dims(), 64);  // 0.5
  EXPECT_EQ(c.padding_token, 151329);
  EXPECT_EQ(c.num_kv_heads, 2);
  j["num_attention_heads"] = 32;  // 6144 / 32 = 192: head_dim stays 128
  EXPECT_EQ(read(j).head_dim(), 128);
  EXPECT_EQ(read(j).explicit_head_dim, 128);
}

// transformers 5.x writes the factor inside rope_parameters too; the two must agree.
TEST(GlmConfig, Transformers5RopeParametersAreRead) {
  nlohmann::json j = glm4_32b_0414_shape();
  j["rope_parameters"] = {
      {"partial_rotary_factor", 0.5}, {"rope_theta", 10000.0}, {"rope_type", "default"}};
  EXPECT_EQ(read(j), read(glm4_32b_0414_shape()));
  j["rope_parameters"]["partial_rotary_factor"] = 0.75;
  EXPECT_NE(error_of([&] { read(j); }).find("different 'partial_rotary_factor'"),
            std::string::npos);
  j.erase("partial_rotary_factor");  // the inner one alone
  EXPECT_EQ(read(j).rotary_dims(), 96);
  j["partial_rotary_factor"] = nullptr;  // a null one beside it, as 5.x reads past
  EXPECT_EQ(read(j).rotary_dims(), 96);
}

// What transformers' GLM cannot build is refused naming the key; what it ignores is accepted.
TEST(GlmConfig, NullsAreRefusedAndMlpBiasIgnored) {
  const nlohmann::json j = glm4_32b_0414_shape();
  EXPECT_NE(error_with(j, "head_dim", nullptr).find("'head_dim' is null"), std::string::npos);
  EXPECT_NE(error_with(j, "partial_rotary_factor", nullptr).find("'partial_rotary_factor' is null"),
            std::string::npos);
  nlohmann::json biased = j;
  biased["mlp_bias"] = true;  // GlmMLP reads no mlp_bias
  EXPECT_EQ(read(biased), read(j));
  EXPECT_TRUE(hf_config_unknown_keys(biased).empty());
  const std::vector<std::string> ignored = hf_config_ignored_keys(biased);
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "mlp_bias"), ignored.end());
}

TEST(GlmConfig, WhatIsNotGlmsIsRefusedNamingIt) {
  const nlohmann::json j = glm4_32b_0414_shape();
  EXPECT_NE(error_with(j, "partial_rotary_factor", 0.29).find("even count"), std::string::npos);
  EXPECT_NE(error_with(j, "rope_scaling",
                       {{"type", "longrope"},
                        {"short_factor", std::vector<double>(32, 1.0)},
                        {"long_factor", std::vector<double>(32, 1.0)}})
                .find("longrope"),
            std::string::npos);
  EXPECT_NE(error_with(j, "sliding_window", 4096).find("sliding_window"), std::string::npos);
  EXPECT_NE(error_with(j, "architectures", {"GlmForCausalLM"}).find("Glm4ForCausalLM"),
            std::string::npos);
  EXPECT_NE(error_with(j, "hidden_act", "gelu").find("hidden_act"), std::string::npos);
}

// PEFT's modules of a GLM model: q, k, v apart and gate_up_proj whole; a pattern selecting a norm
// is refused as PEFT refuses it.
TEST(GlmConfig, LoraTargetsAreGlmsModules) {
  ModelConfig c = read(glm4_32b_0414_shape());
  c.num_layers = 2;
  LoraSpec spec;
  spec.rank = 4;
  spec.set_targets({"all-linear"}, "--lora-targets");
  c.set_lora(spec);
  EXPECT_EQ(c.lora.targets_text(), "q_proj,k_proj,v_proj,o_proj,gate_up_proj,down_proj");
  spec.set_targets({"gate_proj", "q_proj"}, "--lora-targets");
  EXPECT_NE(c.set_lora(spec).find("no gate_proj"), std::string::npos);
  spec.set_targets({"gate_proj"}, "--lora-targets");
  EXPECT_NE(error_of([&] { c.set_lora(spec); }).find("GLM fuses gate and up into gate_up_proj"),
            std::string::npos);
  nlohmann::json peft = {{"peft_type", "LORA"},
                         {"r", 4},
                         {"lora_alpha", 8},
                         {"target_modules", ".*(q_proj|post_mlp_layernorm)"}};
  EXPECT_NE(error_of([&] {
              c.set_lora(LoraSpec::from_peft_json(peft, "adapter_config.json"));
            }).find("post_mlp_layernorm', which is no linear layer"),
            std::string::npos);
}

}  // namespace
}  // namespace zt

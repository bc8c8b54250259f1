// Phi-3 (Phi3ForCausalLM): Llama's model whose checkpoint fuses q/k/v into qkv_proj and gate/up
// into gate_up_proj. The config keys Phi3Config adds, what is refused, and where each layout
// tensor lies in the fused checkpoint tensors (transformers' split points, not zerotrain's
// output). The weights themselves are checked against transformers in oracle_hf_phi3.
#include <gtest/gtest.h>

#include <string>

#include "model/config.h"
#include "model/hf_checkpoint_tensors.h"
#include "model/layout.h"
#include "support/error_text.h"

namespace zt {
namespace {

// A small Phi3Config as save_pretrained writes it (transformers 4.46), grouped-query heads.
nlohmann::json phi3_json() {
  return {{"architectures", {"Phi3ForCausalLM"}},
          {"model_type", "phi3"},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 256},
          {"max_position_embeddings", 128},
          {"original_max_position_embeddings", 4096},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"rope_scaling", nullptr},
          {"hidden_act", "silu"},
          {"attention_dropout", 0.0},
          {"embd_pdrop", 0.0},
          {"resid_pdrop", 0.0},
          {"sliding_window", nullptr},
          {"bos_token_id", 1},
          {"eos_token_id", 32000},
          {"pad_token_id", 32},
          {"tie_word_embeddings", false}};
}

std::string error_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = phi3_json();
  j[key] = value;
  return error_of([&] { ModelConfig::from_hf_json(j, "phi3.json"); });
}

TEST(Phi3Config, IsReadAsLlamasModelWithFusedProjectionsAndWrittenBack) {
  const ModelConfig c = ModelConfig::from_hf_json(phi3_json(), "phi3.json");
  EXPECT_TRUE(c.fused_projections);
  EXPECT_EQ(c.model_type(), "phi3");
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(hf_config_unknown_keys(phi3_json()).empty());
  const nlohmann::json back = c.to_hf_json();
  EXPECT_EQ(back.at("architectures"), nlohmann::json({"Phi3ForCausalLM"}));
  EXPECT_TRUE(back.at("sliding_window").is_null());
  EXPECT_EQ(ModelConfig::from_hf_json(back, "again"), c);
  // Mini-4k's window (2047) is kept and written back, as Mistral's is.
  nlohmann::json windowed = phi3_json();
  windowed["sliding_window"] = 40;
  const ModelConfig w = ModelConfig::from_hf_json(windowed, "phi3.json");
  EXPECT_EQ(w.sliding_window, 40);
  EXPECT_EQ(w.model_type(), "phi3");
  EXPECT_EQ(ModelConfig::from_hf_json(w.to_hf_json(), "again"), w);
}

TEST(Phi3Config, WhatPhi3ComputesOtherwiseIsRefusedNamingTheKey) {
  EXPECT_NE(error_with("resid_pdrop", 0.1).find("phi3.json: 'resid_pdrop': 0.1 is not implemented"),
            std::string::npos);
  EXPECT_NE(error_with("embd_pdrop", 0.1).find("'embd_pdrop'"), std::string::npos);
  EXPECT_NE(error_with("attention_bias", true).find("Phi3ForCausalLM (no biases)"),
            std::string::npos);
  EXPECT_NE(error_with("head_dim", 32).find("'head_dim': 32 differs"), std::string::npos);
  EXPECT_NE(error_with("architectures", {"LlamaForCausalLM"}).find("'architectures'"),
            std::string::npos);
  // Phi-3.5 and the 128k models: longrope (its factors and attention scaling) is not implemented.
  const nlohmann::json longrope = {
      {"type", "longrope"}, {"short_factor", {1.0, 1.0}}, {"long_factor", {2.0, 2.0}}};
  EXPECT_NE(error_with("rope_scaling", longrope).find("rope_type 'longrope' is not implemented"),
            std::string::npos);
  const nlohmann::json linear = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_NE(error_with("rope_scaling", linear).find("longrope alone"), std::string::npos);
  // LoRA would adapt q, k and v apart, where PEFT adapts the fused qkv_proj as one module.
  ModelConfig c = ModelConfig::from_hf_json(phi3_json(), "phi3.json");
  c.lora.rank = 4;
  c.lora.targets[0] = true;
  EXPECT_NE(error_of([&] { c.validate(); }).find("LoRA on a Phi-3 model"), std::string::npos);
  // A PEFT adapter of a Phi-3 names the fused modules (PEFT's all-linear saves them as a list).
  for (const char* fused : {"qkv_proj", "gate_up_proj"})
    EXPECT_NE(error_of([&] {
                LoraSpec::parse_targets({fused, "o_proj"}, "a.json");
              }).find("a.json: '" + std::string(fused) + "' is a fused projection of Phi-3"),
              std::string::npos);
}

TEST(Phi3CheckpointTensors, FusedTensorsStackTheirPartsInTransformersOrder) {
  const ParamLayout layout(ModelConfig::from_hf_json(phi3_json(), "phi3.json"));
  const std::vector<HfCheckpointTensor> stored = hf_checkpoint_tensors(layout);
  // Per layer: input norm, qkv, o, post norm, gate_up, down; then embedding, final norm, head.
  EXPECT_EQ(stored.size(), 2u * 6u + 3u);
  const std::vector<HfCheckpointPlace> places = hf_checkpoint_places(layout);
  auto place_of = [&](const std::string& name) {
    return places.at(static_cast<size_t>(layout.find(name)));
  };
  const std::string attn = "model.layers.1.self_attn.", mlp = "model.layers.1.mlp.";
  // q is H·hd = 64 rows of 64, k and v KV·hd = 32 rows each: [128, 64].
  for (const HfCheckpointTensor& t : stored) {
    if (t.name == attn + "qkv_proj.weight") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{128, 64}));
      EXPECT_EQ(t.parts.size(), 3u);
    }
    if (t.name == mlp + "gate_up_proj.weight") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{192, 64}));
      EXPECT_EQ(t.parts.size(), 2u);
    }
    EXPECT_EQ(t.name.find("q_proj"), std::string::npos);
  }
  EXPECT_EQ(place_of(attn + "q_proj.weight").name, attn + "qkv_proj.weight");
  EXPECT_EQ(place_of(attn + "q_proj.weight").element_offset, 0);
  EXPECT_EQ(place_of(attn + "k_proj.weight").element_offset, 64 * 64);
  EXPECT_EQ(place_of(attn + "v_proj.weight").element_offset, (64 + 32) * 64);
  EXPECT_EQ(place_of(mlp + "gate_proj.weight").element_offset, 0);
  EXPECT_EQ(place_of(mlp + "up_proj.weight").name, mlp + "gate_up_proj.weight");
  EXPECT_EQ(place_of(mlp + "up_proj.weight").element_offset, 96 * 64);
  EXPECT_EQ(place_of(attn + "o_proj.weight").name, attn + "o_proj.weight");
  // Other families store every tensor as it is.
  const ParamLayout llama(preset_config("tiny"));
  EXPECT_EQ(hf_checkpoint_tensors(llama).size(), llama.tensors().size());
}

}  // namespace
}  // namespace zt

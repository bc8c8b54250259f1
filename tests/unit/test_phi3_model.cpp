// Phi-3 (Phi3ForCausalLM): Llama's model whose checkpoint fuses q/k/v into qkv_proj and gate/up
// into gate_up_proj. The config keys Phi3Config adds, what is refused, and where each layout
// tensor lies in the fused checkpoint tensors (transformers' split points, not zerotrain's
// output). The weights themselves are checked against transformers in oracle_hf_phi3.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/backend.h"
#include "backend/rope.h"
#include "model/config.h"
#include "model/hf_checkpoint_tensors.h"
#include "model/kv_cache_decoder.h"
#include "model/layout.h"
#include "model/llama.h"
#include "model/trainable.h"
#include "support/error_text.h"
#include "util/memory.h"

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
  // A longrope factor list needs head_dim / 2 = 8 values here.
  const nlohmann::json longrope = {
      {"type", "longrope"}, {"short_factor", {1.0, 1.0}}, {"long_factor", {2.0, 2.0}}};
  EXPECT_NE(error_with("rope_scaling", longrope).find("one value per rotated pair, 8"),
            std::string::npos);
  EXPECT_NE(error_with("rope_scaling", {{"type", "su"}}).find("longrope's older name"),
            std::string::npos);
  const nlohmann::json linear = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_NE(error_with("rope_scaling", linear).find("longrope alone"), std::string::npos);
}

// Phi-4-mini's partial_rotary_factor (transformers' Phi3 from 4.49): RoPE rotates the leading
// int(head_dim · factor) elements of each head, and longrope has one factor per rotated pair.
TEST(Phi3Config, PartialRotaryFactorRotatesTheLeadingElementsOfEachHead) {
  nlohmann::json j = phi3_json();
  j["partial_rotary_factor"] = 0.75;  // 12 of each head's 16, as Phi-4-mini's 96 of 128
  const ModelConfig c = ModelConfig::from_hf_json(j, "phi4.json");
  EXPECT_EQ(c.rotary_dims(), 12);
  EXPECT_EQ(c.rope().rotary_dims, 12);
  EXPECT_EQ(c.rope().rotated(c.head_dim()), 12);
  EXPECT_EQ(ModelConfig::from_hf_json(phi3_json(), "phi3.json").rope().rotated(16), 16);
  EXPECT_EQ(c.to_hf_json().at("partial_rotary_factor"), 0.75);
  EXPECT_EQ(ModelConfig::from_hf_json(c.to_hf_json(), "again"), c);
  // transformers 5.x writes it inside rope_parameters: the same model.
  nlohmann::json v5 = phi3_json();
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.75}};
  EXPECT_EQ(ModelConfig::from_hf_json(v5, "v5.json"), c);
  v5["partial_rotary_factor"] = 0.5;
  EXPECT_NE(error_of([&] {
              ModelConfig::from_hf_json(v5, "v5.json");
            }).find("'rope_parameters' and the top level give different"),
            std::string::npos);
  // Longrope: 6 factors for the 12 rotated elements, not head_dim / 2.
  j["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", std::vector<double>(6, 1.0)},
                       {"long_factor", std::vector<double>(6, 2.0)}};
  EXPECT_EQ(ModelConfig::from_hf_json(j, "phi4.json").rope().scaling.long_factor.size(), 6u);
  j["rope_scaling"]["short_factor"] = std::vector<double>(8, 1.0);
  j["rope_scaling"]["long_factor"] = std::vector<double>(8, 1.0);
  EXPECT_NE(error_of([&] {
              ModelConfig::from_hf_json(j, "phi4.json");
            }).find("one value per rotated pair, 6 (head_dim · partial_rotary_factor / 2)"),
            std::string::npos);
  // int(16 · 0.7) = 11 elements cannot be paired; a factor outside (0, 1] rotates nothing sane.
  EXPECT_NE(error_with("partial_rotary_factor", 0.7).find("rotates 11 elements"),
            std::string::npos);
  EXPECT_NE(error_with("partial_rotary_factor", 1.5).find("must be in (0, 1]"), std::string::npos);
  EXPECT_NE(error_with("partial_rotary_factor", 0.0).find("must be in (0, 1]"), std::string::npos);
  EXPECT_NE(error_with("partial_rotary_factor", "0.75").find("'partial_rotary_factor'"),
            std::string::npos);
}

// LoRA on Phi-3 adapts the modules its checkpoint has, as PEFT matches target_modules against
// them: qkv_proj, o_proj, gate_up_proj and down_proj. A fused adapter's B holds its parts' rows
// (q, k, v; gate, up) as the fused weight does; each projection of the model takes its own.
TEST(Phi3Lora, TargetsAreTheFusedModulesAsPeftMatchesThem) {
  const ModelConfig phi3 = ModelConfig::from_hf_json(phi3_json(), "phi3.json");
  const ModelConfig llama = preset_config("tiny");
  std::string warning;
  auto fitted = [&](ModelConfig c, const nlohmann::json& target_modules) {
    warning = c.set_lora(
        LoraSpec::from_peft_json({{"r", 4}, {"target_modules", target_modules}}, "a.json"));
    c.validate();
    return c.lora.targets_text();
  };
  EXPECT_EQ(fitted(phi3, "all-linear"), "qkv_proj,o_proj,gate_up_proj,down_proj");
  EXPECT_EQ(fitted(llama, "all-linear"), "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
  EXPECT_EQ(fitted(phi3, {"gate_up_proj", "qkv_proj"}), "qkv_proj,gate_up_proj");
  // PEFT adapts the names the model has when another name has none (Phi-3 cookbooks list
  // Llama's seven: PEFT adapts o_proj and down_proj alone); zerotrain warns, naming them.
  EXPECT_EQ(fitted(phi3, {"q_proj", "k_proj", "o_proj", "down_proj"}), "o_proj,down_proj");
  EXPECT_EQ(warning,
            "a.json target_modules: q_proj,k_proj,o_proj,down_proj: a phi3 model has no q_proj, "
            "k_proj (its projections: qkv_proj, o_proj, gate_up_proj, down_proj, all-linear); as "
            "PEFT does, zerotrain adapts o_proj,down_proj alone");
  EXPECT_EQ(fitted(llama, {"qkv_proj", "o_proj"}), "o_proj");
  EXPECT_NE(warning.find("a llama model has no qkv_proj"), std::string::npos);
  EXPECT_EQ(fitted(phi3, "all-linear"), "qkv_proj,o_proj,gate_up_proj,down_proj");
  EXPECT_EQ(warning, "");  // all-linear selects the model's projections
  // A regular expression selects among the model's modules.
  EXPECT_EQ(fitted(phi3, ".*\\.(qkv|q|o)_proj"), "qkv_proj,o_proj");
  EXPECT_EQ(fitted(llama, ".*\\.(qkv|q|o)_proj"), "q_proj,o_proj");
  // No name the model has: refused naming its projections (PEFT: "not found in the base model").
  const std::string none = error_of([&] { fitted(phi3, {"q_proj", "v_proj"}); });
  EXPECT_NE(none.find("q_proj,v_proj: a phi3 model has no such projection (its projections: "
                      "qkv_proj, o_proj, gate_up_proj, down_proj, all-linear)"),
            std::string::npos)
      << none;
  EXPECT_NE(error_of([&] { fitted(llama, {"gate_up_proj"}); }).find("has no such projection"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ModelConfig c = phi3;
              c.set_lora(LoraSpec::from_peft_json({{"r", 4}}, "b.json"));
            })
                .find("b.json (no target_modules: PEFT's default for Llama-family models): "
                      "q_proj,v_proj: a phi3 model has no such projection"),
            std::string::npos);
  // A regular expression over Phi-3's modules: its activation and dropouts are no linear layers.
  EXPECT_NE(error_of([&] {
              fitted(phi3, ".*\\.(qkv_proj|activation_fn)");
            }).find("selects 'model.layers.0.mlp.activation_fn', which is no linear layer"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              fitted(phi3, ".*(qkv_proj|resid_mlp_dropout)");
            }).find("selects 'model.layers.0.resid_mlp_dropout', which is no linear layer"),
            std::string::npos);
  EXPECT_EQ(fitted(phi3, ".*\\.(qkv_proj|act_fn)"), "qkv_proj");  // Llama's act_fn: none here
  // A spec not fitted to the model is refused by its validation, naming the target.
  ModelConfig unfitted = phi3;
  unfitted.lora.rank = 4;
  unfitted.lora.targets[static_cast<size_t>(LoraTarget::kQ)] = true;
  EXPECT_NE(error_of([&] { unfitted.validate(); }).find("LoRA target q_proj: a phi3 model"),
            std::string::npos);
}

TEST(Phi3Lora, AFusedAdapterHoldsItsPartsRowsInTheFusedOrder) {
  ModelConfig c = ModelConfig::from_hf_json(phi3_json(), "phi3.json");
  c.set_lora(LoraSpec::from_peft_json({{"r", 4}, {"target_modules", "all-linear"}}, "a.json"));
  const ParamLayout layout(c);
  const int64_t qd = c.q_dim(), kv = c.kv_dim(), f = c.intermediate_size, d = c.hidden_size;
  auto shape = [&](const std::string& name) {
    return layout.tensors()[static_cast<size_t>(layout.find(name))].shape;
  };
  EXPECT_EQ(shape("model.layers.1.self_attn.qkv_proj.lora_A.weight"), (std::vector<int64_t>{4, d}));
  EXPECT_EQ(shape("model.layers.1.self_attn.qkv_proj.lora_B.weight"),
            (std::vector<int64_t>{qd + 2 * kv, 4}));
  EXPECT_EQ(shape("model.layers.1.mlp.gate_up_proj.lora_B.weight"),
            (std::vector<int64_t>{2 * f, 4}));
  EXPECT_EQ(layout.find("model.layers.1.self_attn.q_proj.lora_A.weight"), -1);
  const int qkv_b = layout.find("model.layers.1.self_attn.qkv_proj.lora_B.weight");
  const int gate_up_b = layout.find("model.layers.1.mlp.gate_up_proj.lora_B.weight");
  const std::pair<TensorRole, int64_t> first_rows[] = {{TensorRole::kQProj, 0},
                                                       {TensorRole::kKProj, qd},
                                                       {TensorRole::kVProj, qd + kv},
                                                       {TensorRole::kGateProj, 0},
                                                       {TensorRole::kUpProj, f}};
  for (const auto& [role, first] : first_rows) {
    const ProjectionLora p = projection_lora(layout, role, 1);
    const bool attention =
        first_rows[0].first == role || role == TensorRole::kKProj || role == TensorRole::kVProj;
    EXPECT_EQ(p.b, attention ? qkv_b : gate_up_b);
    EXPECT_EQ(p.b_first_row, first);
  }
  EXPECT_EQ(projection_lora(layout, TensorRole::kOProj, 1).b,
            layout.find("model.layers.1.self_attn.o_proj.lora_B.weight"));
}

// Phi-3.5-mini's and the 128k models' rope scaling. The frequencies and the factor on cos and sin
// are transformers' formulas (Phi3LongRoPEScaledRotaryEmbedding, 4.46) written out here; the
// model with them is checked against transformers in oracle_hf_phi3_longrope(_long).
TEST(Phi3Config, LongropeTakesTheFactorsOfTheSequenceLengthAndTheAttentionFactorOfItsLengths) {
  nlohmann::json j = phi3_json();
  std::vector<double> shorts, longs;
  for (int i = 0; i < 8; ++i) shorts.push_back(1.0 + 0.25 * i), longs.push_back(4.0 + i);
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", shorts}, {"long_factor", longs}};
  j["original_max_position_embeddings"] = 32;  // max_position_embeddings 128: scale 4
  const ModelConfig c = ModelConfig::from_hf_json(j, "phi3.json");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kLongrope);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 32);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(32.0)));
  const std::vector<float> inv = rope_inv_freq(c.rope(), c.head_dim());
  for (size_t i = 0; i < 8; ++i) {
    const float power = static_cast<float>(std::pow(10000.0, static_cast<float>(2 * i) / 16.0f));
    EXPECT_EQ(inv[i], 1.0f / (static_cast<float>(shorts[i]) * power)) << i;
  }
  // Written back as Phi3Config reads it: three keys, and the original length at the top level.
  const nlohmann::json back = c.to_transformers_json();
  EXPECT_EQ(back.at("rope_scaling").size(), 3u);
  EXPECT_EQ(back.at("rope_scaling").at("type"), "longrope");
  EXPECT_EQ(back.at("original_max_position_embeddings"), 32);
  EXPECT_EQ(ModelConfig::from_hf_json(back, "again"), c);
  EXPECT_TRUE(hf_config_unknown_keys(j).empty());
  // Sequences up to the original length take the short factors, longer ones the long factors
  // (transformers chooses by the forward's sequence length), the attention factor either way.
  EXPECT_FALSE(c.rope_for_length(32).scaling.long_factors);
  EXPECT_TRUE(c.rope_for_length(33).scaling.long_factors);
  EXPECT_EQ(rope_inv_freq(c.rope_for_length(32), c.head_dim()), inv);
  const std::vector<float> long_inv = rope_inv_freq(c.rope_for_length(33), c.head_dim());
  for (size_t i = 0; i < 8; ++i) {
    const float power = static_cast<float>(std::pow(10000.0, static_cast<float>(2 * i) / 16.0f));
    EXPECT_EQ(long_inv[i], 1.0f / (static_cast<float>(longs[i]) * power)) << i;
  }
  EXPECT_FALSE(preset_config("tiny").rope_for_length(1 << 20).scaling.long_factors);
  auto be = make_cpu_backend();
  MemoryTracker memory;
  EXPECT_NO_THROW(LlamaModel(c, *be, memory, 1, 33));
  // Decoding past the original length switches factors as transformers does (oracle_hf_phi3_*).
  EXPECT_NO_THROW(KvCacheDecoder(c, *be, memory, 64, 8));
  // Without a longer max_position_embeddings the factor is 1; a Llama's longrope is refused.
  j["max_position_embeddings"] = 32;
  EXPECT_EQ(ModelConfig::from_hf_json(j, "phi3.json").rope_scaling.attention_factor, 1.0);
  nlohmann::json llama = preset_config("tiny").to_hf_json();
  llama["rope_scaling"] = j["rope_scaling"];
  EXPECT_NE(error_of([&] {
              ModelConfig::from_hf_json(llama, "l.json");
            }).find("longrope is implemented for Phi-3"),
            std::string::npos);
}

TEST(Phi3Config, AnAbsentPadTokenIdIsPhi3ConfigsDefault) {
  nlohmann::json j = phi3_json();
  j.erase("pad_token_id");
  j["vocab_size"] = 32064;
  const ModelConfig c = ModelConfig::from_hf_json(j, "phi3.json");
  EXPECT_EQ(c.padding_token, 32000);
  j["vocab_size"] = 256;  // transformers cannot build it: padding_idx outside the embedding
  EXPECT_NE(error_of([&] {
              ModelConfig::from_hf_json(j, "phi3.json");
            }).find("phi3.json: has no 'pad_token_id', and Phi3Config's default 32000"),
            std::string::npos);
  // None is written as null, which Phi3Config reads as none.
  j["pad_token_id"] = nullptr;
  const ModelConfig none = ModelConfig::from_hf_json(j, "phi3.json");
  EXPECT_EQ(none.padding_token, -1);
  EXPECT_TRUE(none.to_hf_json().at("pad_token_id").is_null());
  EXPECT_EQ(ModelConfig::from_hf_json(none.to_hf_json(), "again"), none);
}

TEST(Phi3Trainable, PatternsMatchTheCheckpointsFusedNamesAsInPyTorch) {
  const ParamLayout layout(ModelConfig::from_hf_json(phi3_json(), "phi3.json"));
  auto trained = [&](const std::vector<std::string>& keep) {
    const TrainableSet s = TrainableSet::from_patterns(layout, keep, {});
    std::vector<std::string> names;
    for (size_t t = 0; t < layout.tensors().size(); ++t)
      if (s.trains(static_cast<int>(t)) && layout.tensors()[t].layer == 0)
        names.push_back(layout.tensors()[t].name);
    return names;
  };
  const std::string a = "model.layers.0.self_attn.", m = "model.layers.0.mlp.";
  const std::vector<std::string> qkv = {a + "q_proj.weight", a + "k_proj.weight",
                                        a + "v_proj.weight"};
  EXPECT_EQ(trained({"qkv_proj"}), qkv);
  // PyTorch's named_parameters of a Phi-3 hold 'v_proj' only inside 'qkv_proj', all three.
  EXPECT_EQ(trained({"v_proj"}), qkv);
  const std::vector<std::string> gate_up = {m + "gate_proj.weight", m + "up_proj.weight"};
  EXPECT_EQ(trained({"gate_up_proj"}), gate_up);
  EXPECT_EQ(trained({"mlp\\.up_proj"}), std::vector<std::string>{m + "up_proj.weight"});
  EXPECT_EQ(trained({"up_proj"}), gate_up);  // PyTorch: inside gate_up_proj
  // --freeze the same way: freezing qkv_proj leaves o_proj and the MLP of layer 0 training.
  const TrainableSet frozen = TrainableSet::from_patterns(layout, {}, {"qkv_proj"});
  for (const std::string& name : qkv) EXPECT_FALSE(frozen.trains(layout.find(name))) << name;
  EXPECT_TRUE(frozen.trains(layout.find(a + "o_proj.weight")));
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

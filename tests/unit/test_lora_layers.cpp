// LoRA adapters chosen by layer, with ranks and alphas by module (model/lora_layers.cpp): PEFT's
// layers_to_transform and layers_pattern, rank_pattern and alpha_pattern, resolved as PEFT
// resolves them, the layout they give (empty adapter groups where a layer has none), the keys
// written back, and the refusals naming the file and key. The resolution against PEFT itself is
// tests/oracle/test_peft_adapter_configs.py's, the training tests/oracle/test_lora_layers.py's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/layout.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/trainable.h"
#include "support/error_text.h"

namespace zt {
namespace {

// The tiny preset with `layers` layers and the adapters of `config` (an adapter_config.json).
ModelConfig adapted(const nlohmann::json& config, int64_t layers = 4) {
  ModelConfig c = preset_config("tiny");
  c.num_layers = layers;
  (void)c.set_lora(LoraSpec::from_peft_json(config, "a.json"));
  return c;
}

// "layer:target" of every adapter a config gives, in layer order.
std::vector<std::string> adapted_modules(const ModelConfig& c) {
  std::vector<std::string> out;
  const auto table = c.lora.adapters(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (const LoraTarget t : kLoraTargetsInLayerOrder)
      if (table[static_cast<size_t>(l)][static_cast<size_t>(t)].present())
        out.push_back(std::to_string(l) + ":" + lora_target_name(t));
  return out;
}

TEST(LoraLayers, LayersToTransformChoosesTheLayersOfTheListedProjections) {
  const nlohmann::json listed = {{"r", 4}, {"target_modules", {"q_proj", "down_proj"}}};
  nlohmann::json j = listed;
  j["layers_to_transform"] = {1, 3};
  const ModelConfig c = adapted(j);
  EXPECT_EQ(adapted_modules(c),
            (std::vector<std::string>{"1:q_proj", "1:down_proj", "3:q_proj", "3:down_proj"}));
  EXPECT_EQ(c.lora.layers_text(), " in layers 1, 3");
  EXPECT_EQ(c.lora.to_json()["layers_to_transform"], nlohmann::json({1, 3}));
  EXPECT_TRUE(LoraSpec::from_peft_json(c.lora.to_json(), "b.json") == c.lora);
  EXPECT_FALSE(LoraSpec::from_peft_json(listed, "b.json") == c.lora);
  // The list's order and repeats choose nothing: [3, 1, 3] is the spec of [1, 3] (a resume of
  // a run from either is one run).
  j["layers_to_transform"] = {3, 1, 3};
  EXPECT_TRUE(adapted(j).lora == c.lora);
  EXPECT_EQ(adapted(j).lora.to_json()["layers_to_transform"], nlohmann::json({1, 3}));
  // One index, as an integer; an empty list is every layer (PEFT's "not using layer indexes").
  j["layers_to_transform"] = 2;
  EXPECT_EQ(adapted_modules(adapted(j)), (std::vector<std::string>{"2:q_proj", "2:down_proj"}));
  j["layers_to_transform"] = nlohmann::json::array();
  EXPECT_EQ(adapted_modules(adapted(j)).size(), 8u);
  // The layout: adapters in layers 1 and 3 alone; layers 0 and 2 keep empty groups, which train
  // nothing, so the backward stops at layer 1's unit.
  j["layers_to_transform"] = {1, 3};
  const ModelConfig c13 = adapted(j);
  const ParamLayout layout(c13);
  for (int l = 0; l < 4; ++l) {
    const GroupInfo& g = layout.groups()[static_cast<size_t>(layout.adapter_group(l))];
    EXPECT_EQ(g.numel == 0, l == 0 || l == 2) << l;
  }
  const TrainableSet lora_only = TrainableSet::from_patterns(layout, {}, {});
  EXPECT_FALSE(lora_only.group_trains(layout, layout.adapter_group(0)));
  EXPECT_TRUE(lora_only.group_trains(layout, layout.adapter_group(1)));
  EXPECT_EQ(lora_only.lowest_backward_group(layout), layout.layer_group(1));
}

// Each layer keeps u = s·(x·Aᵀ) [M, r] of its own adapters alone: none in a layer without, and
// each at its own rank.
TEST(LoraLayers, ActivationsHoldEachLayersAdaptersAtTheirRanks) {
  const int64_t B = 1, T = 64;
  const ModelConfig c = adapted({{"r", 4},
                                 {"target_modules", {"q_proj", "v_proj", "down_proj"}},
                                 {"layers_to_transform", {1, 3}},
                                 {"rank_pattern", {{"v_proj", 2}, {"down_proj", 6}}}});
  const ActivationPlan base = ActivationPlan::make(c.base(), B, T, {}, 0, DType::kFloat32);
  const ActivationPlan plan = ActivationPlan::make(c, B, T, {}, 0, DType::kFloat32);
  EXPECT_EQ(plan.layer_saved - base.layer_saved, 2 * (4 + 2 + 6) * B * T * 4);
}

TEST(LoraLayers, LayersPatternNamesWhereTheLayerIndexIsRead) {
  nlohmann::json j = {{"r", 4}, {"target_modules", {"v_proj"}}, {"layers_to_transform", {2}}};
  for (const nlohmann::json& pattern : {nlohmann::json("layers"), nlohmann::json({"h", "layers"}),
                                        nlohmann::json(""), nlohmann::json("la.ers")}) {
    j["layers_pattern"] = pattern;
    EXPECT_EQ(adapted_modules(adapted(j)), std::vector<std::string>{"2:v_proj"}) << pattern;
  }
  // GPT-2's "h" finds no index in a Llama's paths: PEFT adapts nothing, zerotrain refuses.
  j["layers_pattern"] = "h";
  EXPECT_NE(error_of([&] { (void)adapted(j); })
                .find("a.json: no module of the model is adapted: layers_to_transform [2] (the "
                      "model's layers: 0 to 3), layers_pattern [\"h\"] (PEFT reads the layer index "
                      "after it"),
            std::string::npos);
  // A pattern whose first group is no number (PEFT's int() fails on it).
  j["layers_pattern"] = "(layers)";
  EXPECT_NE(error_of([&] { (void)adapted(j); }).find("reads 'layers' from"), std::string::npos);
}

TEST(LoraLayers, RankAndAlphaPatternsGiveModulesTheirOwn) {
  const nlohmann::json j = {
      {"r", 4},
      {"lora_alpha", 8},
      {"target_modules", {"q_proj", "v_proj", "down_proj"}},
      {"rank_pattern", {{"v_proj", 2}, {"layers.1.mlp.down_proj", 6}}},
      {"alpha_pattern", {{"q_proj", 32}, {"model.layers.0.mlp.down_proj", 3}}}};
  const ModelConfig c = adapted(j, 2);
  const auto table = c.lora.adapters(2);
  // Read as PEFT 0.15 reads it; a module older releases read otherwise (in every order of the
  // keys) is named in a warning. 0.14 matches a key after a dot, or as the whole path itself
  // (the key above: no warning); 0.13 looks the first key, of rank_pattern then alpha_pattern, up
  // in both.
  ModelConfig two = preset_config("tiny");
  EXPECT_EQ(two.set_lora(LoraSpec::from_peft_json(j, "a.json")), "");
  nlohmann::json from_start = j;
  from_start["alpha_pattern"] = {{"q_proj", 32}, {"model.layers.[01].mlp.down_proj", 3}};
  EXPECT_EQ(two.set_lora(LoraSpec::from_peft_json(from_start, "a.json")),
            "a.json: rank_pattern and alpha_pattern give 2 module(s) another r or lora_alpha in "
            "PEFT 0.13 or 0.14 than in 0.15 and later, which zerotrain follows "
            "('model.layers.0.mlp.down_proj': r 4, lora_alpha 3 as PEFT 0.15 reads it; 0.14 r 4, "
            "lora_alpha 8, 0.13 r 4, lora_alpha 8); an adapter trained with an older PEFT trained "
            "with those");
  // Two keys of the same rank: 0.13 looks up whichever comes first in the file, which may be the
  // one alpha_pattern holds too: no warning.
  nlohmann::json order = {{"r", 4},
                          {"target_modules", {"q_proj"}},
                          {"rank_pattern", {{"q_proj", 8}, {"layers.0.self_attn.q_proj", 8}}},
                          {"alpha_pattern", {{"q_proj", 16}}}};
  EXPECT_EQ(two.set_lora(LoraSpec::from_peft_json(order, "a.json")), "");
  nlohmann::json joint = {{"r", 4},
                          {"target_modules", {"q_proj"}},
                          {"rank_pattern", {{"q_proj", 2}}},
                          {"alpha_pattern", {{"self_attn.q_proj", 16}}}};
  EXPECT_NE(two.set_lora(LoraSpec::from_peft_json(joint, "a.json"))
                .find("give 2 module(s) another r or lora_alpha in PEFT 0.13 or 0.14 than in 0.15 "
                      "and later, which zerotrain follows ('model.layers.0.self_attn.q_proj': r 2, "
                      "lora_alpha 16 as PEFT 0.15 reads it; 0.14 r 2, lora_alpha 16, 0.13 r 2, "
                      "lora_alpha 8)"),
            std::string::npos);
  joint["alpha_pattern"] = {{"q_proj", 16}};  // one key in both: every release reads it alike
  EXPECT_EQ(two.set_lora(LoraSpec::from_peft_json(joint, "a.json")), "");
  auto at = [&](int l, LoraTarget t) {
    const LoraAdapter a = table[static_cast<size_t>(l)][static_cast<size_t>(t)];
    return std::to_string(a.rank) + "/" + std::to_string(static_cast<int>(a.alpha));
  };
  EXPECT_EQ(at(0, LoraTarget::kQ), "4/32");
  EXPECT_EQ(at(1, LoraTarget::kV), "2/8");
  EXPECT_EQ(at(0, LoraTarget::kDown), "4/3");  // a key that is the whole path
  EXPECT_EQ(at(1, LoraTarget::kDown), "6/8");
  // The layout's shapes and scales follow.
  const ParamLayout layout(c);
  const auto& v = layout.tensors()[static_cast<size_t>(
      layout.lora_tensor(1, static_cast<int>(LoraTarget::kV), false))];
  EXPECT_EQ(v.shape, (std::vector<int64_t>{2, 64}));
  EXPECT_FLOAT_EQ(layout.lora_scale(0, static_cast<int>(LoraTarget::kQ)), 32.0f / 4);
  EXPECT_FLOAT_EQ(layout.lora_scale(1, static_cast<int>(LoraTarget::kDown)), 8.0f / 6);
  const ProjectionLora down = projection_lora(layout, TensorRole::kDownProj, 1);
  EXPECT_EQ(down.rank, 6);
  EXPECT_FLOAT_EQ(down.scale, 8.0f / 6);
  EXPECT_EQ(c.lora.to_json()["rank_pattern"], j["rank_pattern"]);
  EXPECT_EQ(c.lora.to_json()["alpha_pattern"], j["alpha_pattern"]);
  EXPECT_EQ(c.lora.layers_text(), " with rank_pattern and alpha_pattern");
  // rslora: alpha/√r with each module's own r.
  nlohmann::json rs = j;
  rs["use_rslora"] = true;
  EXPECT_FLOAT_EQ(ParamLayout(adapted(rs, 2)).lora_scale(1, static_cast<int>(LoraTarget::kDown)),
                  static_cast<float>(8 / std::sqrt(6.0)));
  // A key is matched whole against the path's last components: "proj" is no module's name.
  nlohmann::json partial = j;
  partial["rank_pattern"] = {{"proj", 16}};
  EXPECT_EQ(adapted(partial, 2).lora.adapters(2)[0][0].rank, 4);
}

// PEFT's exclude_modules (0.14 and later): a list of names, each the path or its end after a
// dot, or a regular expression matched whole; every module excluded is refused, as PEFT refuses.
TEST(LoraLayers, ExcludeModulesLeavesModulesUnadapted) {
  nlohmann::json j = {{"r", 4}, {"target_modules", {"q_proj", "down_proj"}}};
  j["exclude_modules"] = {"layers.1.mlp.down_proj", "model.layers.0.self_attn.q_proj", "lm_head"};
  const ModelConfig listed = adapted(j, 2);
  EXPECT_EQ(adapted_modules(listed), (std::vector<std::string>{"0:down_proj", "1:q_proj"}));
  EXPECT_EQ(listed.lora.to_json()["exclude_modules"], j["exclude_modules"]);
  EXPECT_TRUE(LoraSpec::from_peft_json(listed.lora.to_json(), "b.json") == listed.lora);
  // A name matches whole path components: "proj" ends no path after a dot. Excluding nothing is
  // warned about, as PEFT warns.
  j["exclude_modules"] = {"proj", "_proj"};
  EXPECT_EQ(adapted_modules(adapted(j, 2)).size(), 4u);
  ModelConfig two = preset_config("tiny");
  EXPECT_EQ(two.set_lora(LoraSpec::from_peft_json(j, "a.json")),
            "a.json: exclude_modules [\"proj\",\"_proj\"] excludes no module the other keys "
            "choose (PEFT warns so too): a misspelt name?");
  j["exclude_modules"] = {"down_proj"};
  EXPECT_EQ(two.set_lora(LoraSpec::from_peft_json(j, "a.json")), "");
  j["target_modules"] = "all-linear";
  j["exclude_modules"] = R"(.*\.1\..*|.*mlp.*)";
  const ModelConfig pattern = adapted(j, 2);
  EXPECT_EQ(adapted_modules(pattern),
            (std::vector<std::string>{"0:q_proj", "0:k_proj", "0:v_proj", "0:o_proj"}));
  EXPECT_EQ(pattern.lora.to_json()["exclude_modules"], j["exclude_modules"]);
  j["exclude_modules"] = ".*";
  EXPECT_NE(error_of([&] { (void)adapted(j, 2); })
                .find("a.json: no module of the model is adapted: exclude_modules \".*\" (PEFT: "
                      "\"All modules were excluded\")"),
            std::string::npos);
  j["exclude_modules"] = "(";
  EXPECT_NE(error_of([&] { (void)adapted(j, 2); }).find("RE2 cannot read"), std::string::npos);
  j["exclude_modules"] = {1};
  EXPECT_NE(error_of([&] { (void)adapted(j, 2); }).find("exclude_modules holds 1"),
            std::string::npos);
}

TEST(LoraLayers, BadLayerKeysAreRefusedNamingTheFileAndKey) {
  const nlohmann::json base = {{"r", 4}, {"target_modules", {"q_proj"}}};
  auto with = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = base;
    j[key] = std::move(value);
    return error_of([&] { (void)adapted(j); });
  };
  // A layer the model lacks: PEFT adapts the others (a warning), or nothing (refused).
  ModelConfig four = preset_config("tiny");
  four.num_layers = 4;
  nlohmann::json beyond = base;
  beyond["layers_to_transform"] = {1, 4, -1};
  EXPECT_NE(four.set_lora(LoraSpec::from_peft_json(beyond, "a.json"))
                .find("a.json: layers_to_transform names layer(s) -1, 4, which the model does not "
                      "have (its layers: 0 to 3); as PEFT does, zerotrain adapts the others"),
            std::string::npos);
  EXPECT_EQ(adapted_modules(four), std::vector<std::string>{"1:q_proj"});
  EXPECT_NE(with("layers_to_transform", {4})
                .find("a.json: no module of the model is adapted: "
                      "layers_to_transform [4] (the model's layers: "
                      "0 to 3)"),
            std::string::npos);
  EXPECT_NE(with("layers_to_transform", "1").find("key 'layers_to_transform' must be a layer"),
            std::string::npos);
  EXPECT_NE(with("layers_to_transform", {1.5}).find("layers_to_transform holds 1.5"),
            std::string::npos);
  EXPECT_NE(with("layers_pattern", 3).find("key 'layers_pattern' must be a name"),
            std::string::npos);
  EXPECT_NE(
      with("layers_pattern", "layers").find("without layers_to_transform: PEFT 0.14 and later"),
      std::string::npos);
  nlohmann::json zero = base;  // PEFT's `not layers_to_transform` holds for the index 0
  zero["layers_to_transform"] = 0;
  zero["layers_pattern"] = "layers";
  EXPECT_NE(error_of([&] { (void)adapted(zero); }).find("key 'layers_pattern' without"),
            std::string::npos);
  zero["layers_to_transform"] = {0};
  EXPECT_EQ(error_of([&] { (void)adapted(zero); }), "");
  EXPECT_NE(with("rank_pattern", {{"q_proj", 2.5}}).find("rank_pattern gives 'q_proj' 2.5"),
            std::string::npos);
  EXPECT_NE(with("rank_pattern", {1, 2}).find("key 'rank_pattern' must be an object"),
            std::string::npos);
  EXPECT_NE(with("alpha_pattern", {{"q_proj", -1}}).find("no positive lora_alpha"),
            std::string::npos);
  EXPECT_NE(with("rank_pattern", {{"q_(proj", 2}})
                .find("rank_pattern key \"q_(proj\" is a "
                      "regular expression RE2 cannot read"),
            std::string::npos);
  // Two keys of one pattern that give a module different values: PEFT's choice is the file's
  // order, which a JSON object here does not keep. The same value twice is one reading.
  EXPECT_NE(with("rank_pattern", {{"q_proj", 2}, {"self_attn.q_proj", 8}})
                .find("rank_pattern: keys 'q_proj', 'self_attn.q_proj' match "
                      "'model.layers.0.self_attn.q_proj' with different values"),
            std::string::npos);
  EXPECT_EQ(with("rank_pattern", {{"q_proj", 8}, {"self_attn.q_proj", 8}}), "");
  // PEFT refuses layers beside a target_modules string (a pattern, or all-linear).
  for (const char* targets : {"all-linear", ".*q_proj"}) {
    nlohmann::json j = base;
    j["target_modules"] = targets;
    j["layers_to_transform"] = {1};
    EXPECT_NE(
        error_of([&] { (void)adapted(j); }).find("key 'layers_to_transform' beside target_modules"),
        std::string::npos)
        << targets;
    j.erase("layers_to_transform");
    j["layers_pattern"] = "layers";
    EXPECT_NE(error_of([&] { (void)adapted(j); }).find("key 'layers_pattern' beside"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace zt

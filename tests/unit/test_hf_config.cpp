// config.json keys that change the model's math and are implemented: rope_scaling (linear,
// llama3), Mistral's sliding window, the attention biases, q/k norms and head_dim of Qwen2/Qwen3.
// Read, validated, written back, and honoured by the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/rope.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/llama.h"
#include "support/error_text.h"
#include "util/error.h"
#include "util/memory.h"

namespace zt {
namespace {

nlohmann::json llama3_scaling() {
  return {{"rope_type", "llama3"},
          {"factor", 8.0},
          {"low_freq_factor", 1.0},
          {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", 64}};
}

ModelConfig with_key(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = preset_config("tiny").to_hf_json();
  j[key] = value;
  return ModelConfig::from_hf_json(j, "cfg.json");
}

TEST(HfConfig, RopeScalingIsReadAndWrittenBack) {
  const ModelConfig c = with_key("rope_scaling", llama3_scaling());
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 64);
  EXPECT_EQ(ModelConfig::from_hf_json(c.to_hf_json(), "again"), c);
  // The older spelling, as transformers keeps it beside rope_type.
  const ModelConfig linear =
      with_key("rope_scaling", {{"type", "linear"}, {"rope_type", "linear"}, {"factor", 2}});
  EXPECT_EQ(linear.rope_scaling.type, RopeScaling::kLinear);
  EXPECT_EQ(ModelConfig::from_hf_json(linear.to_hf_json(), "again"), linear);
  EXPECT_EQ(with_key("rope_scaling", nullptr).rope_scaling.type, RopeScaling::kNone);
  // Unscaled configs are written without the key: checkpoint manifests fingerprint this object,
  // and those written before rope_scaling was read must keep matching.
  EXPECT_FALSE(preset_config("tiny").to_hf_json().contains("rope_scaling"));
}

TEST(HfConfig, BadRopeScalingIsRefusedNamingTheKey) {
  auto error = [](const nlohmann::json& value) {
    return error_of([&] { with_key("rope_scaling", value); });
  };
  nlohmann::json extra = llama3_scaling();
  extra["beta_fast"] = 32;
  nlohmann::json missing = llama3_scaling();
  missing.erase("high_freq_factor");
  nlohmann::json inverted = llama3_scaling();
  inverted["low_freq_factor"] = 4.0;
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"rope_type", "dynamic"}, {"factor", 4.0}}, "rope_type 'dynamic' is not implemented"},
      {{{"rope_type", "dynamic"}, {"factor", 2.0}}, "rope_type 'dynamic'"},
      {{{"factor", 2.0}}, "has no 'rope_type'"},
      {{{"type", "linear"}, {"rope_type", "llama3"}, {"factor", 2.0}}, "differ"},
      {{{"rope_type", "linear"}, {"factor", 0.5}}, "factor must be a finite number >= 1"},
      {{{"rope_type", "linear"}}, "missing required key 'factor'"},
      {extra, "unknown key 'beta_fast'"},
      {missing, "missing required key 'high_freq_factor'"},
      {inverted, "low_freq_factor < high_freq_factor"},
      {"llama3", "must be null or an object"},
  };
  for (const auto& [value, expected] : cases) {
    const std::string e = error(value);
    EXPECT_NE(e.find(expected), std::string::npos) << value.dump() << " → " << e;
    EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
  }
}

// transformers 5.x writes rope_theta and the scaling into one rope_parameters object, and
// "rope_type": "default" for no scaling; both spellings give the same model, and a config that
// holds both must say the same in each.
TEST(HfConfig, RopeParametersOfTransformers5AreRead) {
  nlohmann::json v4 = preset_config("tiny").to_hf_json();
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = llama3_scaling();
  nlohmann::json v5 = v4;
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = llama3_scaling();
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  EXPECT_EQ(ModelConfig::from_hf_json(v5, "v5.json"), ModelConfig::from_hf_json(v4, "v4.json"));
  nlohmann::json plain = preset_config("tiny").to_hf_json();
  plain.erase("rope_theta");
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  const ModelConfig c = ModelConfig::from_hf_json(plain, "p.json");
  EXPECT_EQ(c.rope_theta, 250000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kNone);
  EXPECT_EQ(with_key("rope_scaling", {{"rope_type", "default"}}).rope_scaling.type,
            RopeScaling::kNone);
  nlohmann::json disagree = v5;
  disagree["rope_theta"] = 10000.0;
  EXPECT_NE(
      error_of([&] { ModelConfig::from_hf_json(disagree, "d.json"); }).find("'rope_parameters'"),
      std::string::npos);
  nlohmann::json partial = plain;
  partial["rope_parameters"]["partial_rotary_factor"] = 0.5;
  EXPECT_NE(error_of([&] {
              ModelConfig::from_hf_json(partial, "q.json");
            }).find("'partial_rotary_factor'"),
            std::string::npos);
  nlohmann::json no_theta = plain;
  no_theta["rope_parameters"].erase("rope_theta");
  EXPECT_NE(error_of([&] { ModelConfig::from_hf_json(no_theta, "n.json"); }).find("'rope_theta'"),
            std::string::npos);
}

// An export's config.json carries rope_scaling's older "type" beside "rope_type" (transformers
// before 4.43 reads only "type"); the model directory's config (which checkpoint manifests
// compare) does not change.
TEST(HfConfig, ExportConfigWritesTheLegacyRopeType) {
  const ModelConfig c = with_key("rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}});
  const nlohmann::json exported = c.to_transformers_json();
  EXPECT_EQ(exported.at("rope_scaling").at("type"), "linear");
  EXPECT_EQ(exported.at("rope_scaling").at("rope_type"), "linear");
  EXPECT_FALSE(c.to_hf_json().at("rope_scaling").contains("type"));
  EXPECT_EQ(ModelConfig::from_hf_json(exported, "again"), c);
  EXPECT_FALSE(preset_config("tiny").to_transformers_json().contains("rope_scaling"));
}

// The scaled frequencies keep the structure of transformers' llama3 rule: the high-frequency band
// untouched, the low-frequency band divided by the factor (both bitwise), the band between
// strictly between the two; linear divides every frequency.
TEST(HfConfig, RopeFrequenciesFollowTheScalingBands) {
  RopeSpec plain = RopeSpec::unscaled(500000.0f), llama3 = plain, linear = plain;
  llama3.scaling = with_key("rope_scaling", llama3_scaling()).rope_scaling;
  linear.scaling.type = RopeScaling::kLinear;
  linear.scaling.factor = 4.0;
  const int64_t hd = 16;
  const std::vector<float> base = rope_inv_freq(plain, hd), scaled = rope_inv_freq(llama3, hd);
  const std::vector<float> lin = rope_inv_freq(linear, hd);
  int bands[3] = {0, 0, 0};
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_EQ(lin[i], base[i] / 4.0f);
    const double wavelen = 2 * M_PI / base[i];
    if (wavelen < 64.0 / 4.0) {
      EXPECT_EQ(scaled[i], base[i]) << i;
      ++bands[0];
    } else if (wavelen > 64.0) {
      EXPECT_EQ(scaled[i], base[i] / 8.0f) << i;
      ++bands[2];
    } else {
      EXPECT_LT(scaled[i], base[i]) << i;
      EXPECT_GT(scaled[i], base[i] / 8.0f) << i;
      ++bands[1];
    }
  }
  EXPECT_GT(bands[0], 0);
  EXPECT_GT(bands[1], 0);
  EXPECT_GT(bands[2], 0);
}

TEST(HfConfig, MistralSlidingWindowIsReadAndSlidesOverLongerSequences) {
  nlohmann::json j = preset_config("tiny").to_hf_json();
  j["model_type"] = "mistral";
  j["architectures"] = {"MistralForCausalLM"};
  // transformers' MistralConfig defaults an absent window to 4096.
  EXPECT_EQ(ModelConfig::from_hf_json(j, "m.json").sliding_window, 4096);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(ModelConfig::from_hf_json(j, "m.json").sliding_window, 0);
  j["sliding_window"] = 16;
  const ModelConfig c = ModelConfig::from_hf_json(j, "m.json");
  EXPECT_EQ(c.sliding_window, 16);
  const nlohmann::json back = c.to_hf_json();
  EXPECT_EQ(back.at("model_type"), "mistral");
  EXPECT_EQ(ModelConfig::from_hf_json(back, "again"), c);
  // transformers' Mistral applies no rope_scaling and its Llama no window: both refused.
  nlohmann::json scaled = j;
  scaled["rope_scaling"] = llama3_scaling();
  EXPECT_NE(error_of([&] { ModelConfig::from_hf_json(scaled, "m.json"); }).find("'rope_scaling'"),
            std::string::npos);
  nlohmann::json llama = preset_config("tiny").to_hf_json();
  llama["sliding_window"] = 4096;
  EXPECT_NE(error_of([&] { ModelConfig::from_hf_json(llama, "l.json"); })
                .find("'sliding_window' 4096 outside a Mistral, Ministral 3, Phi-3, Gemma 2, Gemma "
                      "3 or OLMo 3 config"),
            std::string::npos);
  j["sliding_window"] = -1;
  EXPECT_NE(error_of([&] { ModelConfig::from_hf_json(j, "m.json"); }).find("sliding_window"),
            std::string::npos);

  // Sequences longer than the window train: its keys slide (attention_scores).
  auto be = make_cpu_backend();
  MemoryTracker memory;
  EXPECT_NO_THROW(LlamaModel(c, *be, memory, 1, 17));
  EXPECT_EQ(c.attention_scores(0, 16).window, 0);  // a window the keys fit in is none
  EXPECT_EQ(c.attention_scores(1, 17).window, 16);
}

// A config.json without model_type (one saved for MistralForCausalLM.from_pretrained) is the
// family its architectures name; with neither key it is Llama's; another class is refused by name.
TEST(HfConfig, WithoutModelTypeTheArchitecturesNameTheFamily) {
  nlohmann::json j = preset_config("tiny").to_hf_json();
  j.erase("model_type");
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = 16;  // refused outside a Mistral config
  EXPECT_EQ(ModelConfig::from_hf_json(j, "m.json").model_type(), "mistral");
  EXPECT_TRUE(hf_config_unknown_keys(j).empty());
  j.erase("sliding_window");
  j.erase("attention_bias");
  j["architectures"] = {"Qwen2ForCausalLM"};
  EXPECT_EQ(ModelConfig::from_hf_json(j, "q.json").model_type(), "qwen2");
  j.erase("architectures");
  EXPECT_EQ(ModelConfig::from_hf_json(j, "l.json").model_type(), "llama");
  j["architectures"] = nlohmann::json::array();  // accepted with model_type "llama" too
  EXPECT_EQ(ModelConfig::from_hf_json(j, "l.json").model_type(), "llama");
  for (const nlohmann::json& archs :
       {nlohmann::json{"GPT2LMHeadModel"}, nlohmann::json{"LlamaForCausalLM", "MistralForCausalLM"},
        nlohmann::json("LlamaForCausalLM")}) {
    j["architectures"] = archs;
    const std::string e = error_of([&] { ModelConfig::from_hf_json(j, "x.json"); });
    EXPECT_NE(e.find("x.json: has no 'model_type', and 'architectures': " + archs.dump() +
                     " names no one model zerotrain implements"),
              std::string::npos)
        << e;
  }
}

// Qwen2 (q/k/v biases), Qwen3 (q/k norms, explicit head_dim, attention_bias) and Llama's own
// attention_bias and head_dim: read by family, laid out as transformers names and shapes them,
// written back to the same config.
TEST(HfConfig, QwenFamiliesBiasesAndHeadDimAddTheirTensors) {
  const nlohmann::json tiny = preset_config("tiny").to_hf_json();  // D 64, H 4, Hkv 2
  auto family = [&](const std::string& type, const std::string& arch) {
    nlohmann::json j = tiny;
    j.erase("attention_bias");
    j.erase("mlp_bias");
    j["model_type"] = type;
    j["architectures"] = {arch};
    j["use_sliding_window"] = false;
    j["sliding_window"] = 4096;
    j["max_window_layers"] = 2;
    return j;
  };
  nlohmann::json qwen2 = family("qwen2", "Qwen2ForCausalLM");
  qwen2["attention_bias"] = false;  // transformers' Qwen2 biases q/k/v whatever this says
  const ModelConfig q2 = ModelConfig::from_hf_json(qwen2, "q2.json");
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_FALSE(q2.o_bias);
  EXPECT_FALSE(q2.qk_norm);
  EXPECT_EQ(q2.model_type(), "qwen2");
  EXPECT_EQ(q2.sliding_window, 0);
  const std::vector<std::string> ignored = hf_config_ignored_keys(qwen2);
  for (const char* key : {"sliding_window", "attention_bias", "max_window_layers"})
    EXPECT_NE(std::find(ignored.begin(), ignored.end(), key), ignored.end()) << key;
  EXPECT_EQ(ModelConfig::from_hf_json(q2.to_hf_json(), "again"), q2);
  const ParamLayout l2(q2);
  EXPECT_EQ(l2.tensor(TensorRole::kQBias, 1).name, "model.layers.1.self_attn.q_proj.bias");
  EXPECT_EQ(l2.tensor(TensorRole::kQBias, 1).shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(l2.tensor(TensorRole::kVBias, 0).shape, (std::vector<int64_t>{32}));
  EXPECT_FALSE(l2.tensor(TensorRole::kKBias, 0).weight_decay);
  EXPECT_EQ(l2.find_role(TensorRole::kOBias, 0), nullptr);
  EXPECT_EQ(l2.find_role(TensorRole::kQNorm, 0), nullptr);
  EXPECT_EQ(l2.total_numel(),
            ParamLayout(preset_config("tiny")).total_numel() + 2 * (64 + 32 + 32));

  // Qwen3: head_dim defaults to 128 as in transformers' Qwen3Config; q is [H·128, D].
  nlohmann::json qwen3 = family("qwen3", "Qwen3ForCausalLM");
  qwen3["attention_bias"] = true;
  qwen3["layer_types"] = {"full_attention", "full_attention"};
  const ModelConfig q3 = ModelConfig::from_hf_json(qwen3, "q3.json");
  EXPECT_EQ(q3.head_dim(), 128);
  EXPECT_EQ(q3.q_dim(), 512);
  EXPECT_TRUE(q3.qk_norm && q3.qkv_bias && q3.o_bias);
  EXPECT_EQ(q3.model_type(), "qwen3");
  EXPECT_EQ(q3.to_hf_json().at("head_dim"), 128);
  EXPECT_EQ(ModelConfig::from_hf_json(q3.to_hf_json(), "again"), q3);
  const ParamLayout l3(q3);
  EXPECT_EQ(l3.tensor(TensorRole::kQProj, 0).shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(l3.tensor(TensorRole::kOProj, 0).shape, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(l3.tensor(TensorRole::kKProj, 0).shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(l3.tensor(TensorRole::kQNorm, 0).name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(l3.tensor(TensorRole::kKNorm, 1).shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(l3.tensor(TensorRole::kOBias, 1).shape, (std::vector<int64_t>{64}));
  EXPECT_FALSE(l3.tensor(TensorRole::kQNorm, 0).weight_decay);
  // A Qwen3 head_dim equal to D/H is one model with or without the key.
  qwen3["head_dim"] = 16;
  EXPECT_EQ(ModelConfig::from_hf_json(qwen3, "q3.json").explicit_head_dim, 0);

  // Llama: attention_bias biases all four projections; head_dim may differ from D/H.
  nlohmann::json llama = tiny;
  llama["attention_bias"] = true;
  llama["head_dim"] = 32;
  const ModelConfig lb = ModelConfig::from_hf_json(llama, "l.json");
  EXPECT_EQ(lb.model_type(), "llama");
  EXPECT_TRUE(lb.qkv_bias && lb.o_bias && !lb.qk_norm);
  EXPECT_EQ(lb.q_dim(), 128);
  EXPECT_EQ(ModelConfig::from_hf_json(lb.to_hf_json(), "again"), lb);
  EXPECT_EQ(ParamLayout(lb).tensor(TensorRole::kOBias, 0).name,
            "model.layers.0.self_attn.o_proj.bias");
  nlohmann::json zero = llama;
  zero["head_dim"] = 0;
  EXPECT_NE(error_of([&] {
              ModelConfig::from_hf_json(zero, "z.json");
            }).find("'head_dim' must be positive"),
            std::string::npos);
  // Written without head_dim when it is the quotient, as before it was read.
  llama["head_dim"] = 16;
  EXPECT_FALSE(ModelConfig::from_hf_json(llama, "l.json").to_hf_json().contains("head_dim"));
}

// pad_token_id is transformers' embedding padding_idx: read (a negative id from the end of the
// vocabulary, as torch takes it), written back, refused outside the vocabulary naming the key.
// layer_types must list every layer, as transformers requires.
// An absent num_key_value_heads is the family's config class default: LlamaConfig's and
// Phi3Config's the query heads, MistralConfig's 8, Qwen2Config's and Qwen3Config's 32 (4.46, 4.54);
// null is the query heads in each.
TEST(HfConfig, AnAbsentNumKeyValueHeadsIsTheFamilysDefault) {
  nlohmann::json j = preset_config("tiny").to_hf_json();  // hidden 64
  j["num_attention_heads"] = 32;
  j["hidden_size"] = 256;
  j.erase("num_key_value_heads");
  const std::vector<std::pair<std::string, int64_t>> families = {
      {"llama", 32}, {"mistral", 8}, {"qwen2", 32}};
  for (const auto& [type, kv_heads] : families) {
    SCOPED_TRACE(type);
    nlohmann::json c = j;
    c["model_type"] = type;
    c.erase("architectures");
    if (type == "mistral") c["sliding_window"] = nullptr;
    if (type != "llama") c.erase("attention_bias");
    EXPECT_EQ(ModelConfig::from_hf_json(c, "cfg.json").num_kv_heads, kv_heads);
    c["num_key_value_heads"] = nullptr;
    EXPECT_EQ(ModelConfig::from_hf_json(c, "cfg.json").num_kv_heads, 32);
  }
}

TEST(HfConfig, PadTokenIdIsThePaddingTokenAndLayerTypesListEveryLayer) {
  const int64_t vocab = preset_config("tiny").vocab_size;
  EXPECT_EQ(preset_config("tiny").padding_token, -1);
  EXPECT_EQ(with_key("pad_token_id", nullptr).padding_token, -1);
  const ModelConfig padded = with_key("pad_token_id", 2);
  EXPECT_EQ(padded.padding_token, 2);
  EXPECT_EQ(padded.to_hf_json().at("pad_token_id"), 2);
  EXPECT_EQ(ModelConfig::from_hf_json(padded.to_hf_json(), "again"), padded);
  EXPECT_FALSE(preset_config("tiny").to_hf_json().contains("pad_token_id"));
  EXPECT_EQ(with_key("pad_token_id", -1).padding_token, vocab - 1);
  for (const nlohmann::json& bad : {nlohmann::json(vocab), nlohmann::json(-vocab - 1)}) {
    const std::string error = error_of([&] { with_key("pad_token_id", bad); });
    EXPECT_NE(error.find("cfg.json: 'pad_token_id' " + bad.dump()), std::string::npos) << error;
  }
  const int64_t layers = preset_config("tiny").num_layers;
  EXPECT_NO_THROW(with_key(
      "layer_types", std::vector<std::string>(static_cast<size_t>(layers), "full_attention")));
  const std::string error = error_of([&] {
    with_key("layer_types",
             std::vector<std::string>(static_cast<size_t>(layers) + 3, "full_attention"));
  });
  EXPECT_NE(error.find("'layer_types'"), std::string::npos) << error;
  EXPECT_NE(error.find("entries for num_hidden_layers"), std::string::npos) << error;
}

}  // namespace
}  // namespace zt

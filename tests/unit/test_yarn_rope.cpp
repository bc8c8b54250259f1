// YaRN rope scaling (rope_type "yarn"): its frequencies against transformers' own, the keys read
// from config.json as Qwen's documented long-context setting writes them into the published
// Qwen2.5 and Qwen3 files, the defaults, DeepSeek's mscale pair, and what is refused. The model
// is checked against transformers in oracle_hf_qwen2_yarn and oracle_hf_llama_yarn_extended.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/rope.h"
#include "model/config.h"
#include "support/error_text.h"
#include "support/hf_config_files.h"

namespace zt {
namespace {

// Qwen's documented rope_scaling for inputs past 32,768 tokens (Qwen2.5-7B-Instruct's model card,
// "Processing long texts"; Qwen3's the same): the file's max_position_embeddings unchanged.
const nlohmann::json kQwenYarn = {
    {"factor", 4.0}, {"original_max_position_embeddings", 32768}, {"type", "yarn"}};

// tests/data/yarn_frequencies.json: transformers 4.46.3's own _compute_yarn_parameters for three
// LlamaConfigs (Qwen2.5-7B's shape with Qwen's setting, other band ends, a band that closes), as
// tests/oracle/yarn_frequencies.py writes them.
nlohmann::json transformers_frequencies() {
  std::ifstream in(std::string(ZT_SOURCE_DIR) + "/tests/data/yarn_frequencies.json");
  return nlohmann::json::parse(in);
}

// The case's LlamaConfig as config.json, its yarn keys given.
nlohmann::json llama_with_yarn(const nlohmann::json& c) {
  const int64_t heads = 4;
  return {{"model_type", "llama"},
          {"hidden_size", c.at("head_dim").get<int64_t>() * heads},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", heads},
          {"vocab_size", 256},
          {"max_position_embeddings", c.at("original_max_position_embeddings")},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", c.at("rope_theta")},
          {"rope_scaling",
           {{"rope_type", "yarn"},
            {"factor", c.at("factor")},
            {"beta_fast", c.at("beta_fast")},
            {"beta_slow", c.at("beta_slow")}}}};
}

// PyTorch's fp32 pow (SLEEF's, within 1 ulp) is not correctly rounded: θ^(2i/r) may differ from
// zerotrain's correctly rounded one in its last bit (1e6^(74/128): 0x1.6fd744p+11 against
// 0x1.6fd746p+11), as it does for the unscaled rotation, and a frequency with it. The blend
// itself is the same fp32 arithmetic, which any error would move by far more: 127 of the 128
// frequencies here agree to the bit.
TEST(YarnRope, FrequenciesAndMagnitudeEqualTransformers) {
  int equal = 0, total = 0;
  const nlohmann::json reference = transformers_frequencies();
  for (const nlohmann::json& c : reference.at("cases")) {
    const std::string what = c.at("what");
    const ModelConfig config = ModelConfig::from_hf_json(llama_with_yarn(c), what);
    EXPECT_EQ(config.rope_scaling.attention_factor, c.at("attention_factor").get<double>()) << what;
    const std::vector<float> got = rope_inv_freq(config.rope(), c.at("head_dim"));
    ASSERT_EQ(got.size(), c.at("inv_freq").size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = std::strtof(c.at("inv_freq")[i].get<std::string>().c_str(), nullptr);
      EXPECT_TRUE(got[i] == want || got[i] == std::nextafter(want, 0.0f) ||
                  got[i] == std::nextafter(want, 1.0f))
          << what << ", pair " << i << ": " << got[i] << " vs " << want;
      equal += got[i] == want;
      ++total;
    }
  }
  EXPECT_EQ(total, 128);
  EXPECT_GE(equal, total - 1) << "more frequencies off in the last bit than PyTorch's pow explains";
}

TEST(YarnRope, QwensSettingReadsFromThePublishedFilesAndIsWrittenBack) {
  for (const char* dir : {"Qwen--Qwen2.5-7B-Instruct", "Qwen--Qwen3-8B"}) {
    nlohmann::json file = published_config(dir);
    file["rope_scaling"] = kQwenYarn;
    const ModelConfig c = read_strict(file, dir);
    const RopeScalingParams& r = c.rope_scaling;
    EXPECT_EQ(r.type, RopeScaling::kYarn) << dir;
    EXPECT_EQ(r.factor, 4.0);
    EXPECT_EQ(r.original_max_positions, 32768);
    EXPECT_EQ(r.beta_fast, 32.0);
    EXPECT_EQ(r.beta_slow, 1.0);
    // transformers' 0.1 * math.log(4.0) + 1.0, in double.
    EXPECT_EQ(r.attention_factor, 1.138629436111989);
    // Written back (with the factor on cos and sin explicit) and read again: the same model.
    const ModelConfig again = read_strict(c.to_transformers_json(), dir);
    EXPECT_EQ(again.rope_scaling, r) << dir;
    EXPECT_EQ(again.rope(), c.rope());
    // transformers 5's rope_parameters spelling of the same setting.
    nlohmann::json v5 = published_config(dir);
    v5.erase("rope_theta");
    v5["rope_parameters"] = {{"rope_type", "yarn"},
                             {"rope_theta", 1000000.0},
                             {"factor", 4.0},
                             {"original_max_position_embeddings", 32768}};
    EXPECT_EQ(read_strict(v5, dir).rope(), c.rope()) << dir;
  }
}

TEST(YarnRope, DefaultsAndTheMagnitudeKeys) {
  nlohmann::json file = published_config("Qwen--Qwen2.5-7B-Instruct");
  const std::string source = "qwen2.5.json";
  // Without original_max_position_embeddings, max_position_embeddings; Python's `or` reads a
  // null or 0 beta as its default.
  file["rope_scaling"] = {{"rope_type", "yarn"},
                          {"factor", 8.0},
                          {"beta_fast", 0},
                          {"beta_slow", nullptr},
                          {"attention_factor", nullptr}};
  RopeScalingParams r = read_strict(file, source).rope_scaling;
  EXPECT_EQ(r.original_max_positions, 32768);
  EXPECT_EQ(r.beta_fast, 32.0);
  EXPECT_EQ(r.beta_slow, 1.0);
  EXPECT_EQ(r.attention_factor, 1.2079441541679836);  // 0.1 * log(8) + 1
  // DeepSeek's pair: get_mscale(40, 0.707) / get_mscale(40, 1.0), as Python evaluates it.
  file["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 40.0},
                          {"mscale", 0.707},     {"mscale_all_dim", 1.0},
                          {"beta_fast", 32},     {"beta_slow", 1},
                          {"truncate", true},    {"original_max_position_embeddings", 4096}};
  r = read_strict(file, source).rope_scaling;
  EXPECT_EQ(r.attention_factor, 0.9210423553163399);
  EXPECT_EQ(r.original_max_positions, 4096);
  // One of the pair alone is the paper's factor; an explicit attention_factor wins over both.
  file["rope_scaling"].erase("mscale_all_dim");
  EXPECT_EQ(read_strict(file, source).rope_scaling.attention_factor, 0.1 * std::log(40.0) + 1.0);
  file["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_EQ(read_strict(file, source).rope_scaling.attention_factor, 1.5);
}

TEST(YarnRope, RefusalsNameTheKey) {
  const nlohmann::json qwen = published_config("Qwen--Qwen2.5-7B-Instruct");
  const std::string source = "qwen2.5.json";
  auto error_with_yarn = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json scaling = kQwenYarn;
    if (value.is_discarded())
      scaling.erase(key);
    else
      scaling[key] = value;
    return error_with_key(qwen, "rope_scaling", scaling, source);
  };
  const nlohmann::json erase = nlohmann::json::value_t::discarded;
  EXPECT_NE(error_with_yarn("truncate", false).find("'truncate': false is not implemented"),
            std::string::npos);
  EXPECT_NE(error_with_yarn("truncate", nullptr).find("'truncate': null is not implemented"),
            std::string::npos);
  EXPECT_NE(error_with_yarn("factor", erase).find("missing required key 'factor'"),
            std::string::npos);
  EXPECT_NE(error_with_yarn("factor", 0.5).find("rope_scaling.factor must be a finite number >= 1"),
            std::string::npos);
  EXPECT_NE(error_with_yarn("attention_factor", 0).find("'attention_factor' must be a positive"),
            std::string::npos);
  EXPECT_NE(error_with_yarn("beta_fast", -1).find("'beta_fast' must be a positive"),
            std::string::npos);
  EXPECT_NE(error_with_yarn("beta_slow", "1").find("'beta_slow' must be a positive"),
            std::string::npos);
  EXPECT_NE(error_with_yarn("original_max_position_embeddings", 0)
                .find("'original_max_position_embeddings' must be positive"),
            std::string::npos);
  EXPECT_NE(error_with_yarn("low_freq_factor", 1.0).find("unknown key 'low_freq_factor'"),
            std::string::npos);
  // The families whose transformers (4.46) attention applies no yarn, or another scaling.
  for (const char* dir : {"mistralai--Mistral-7B-Instruct-v0.3",
                          "microsoft--Phi-3-mini-4k-instruct", "google--gemma-2-9b-it"}) {
    const std::string error = error_with_key(published_config(dir), "rope_scaling", kQwenYarn, dir);
    EXPECT_NE(error.find("rope_scaling"), std::string::npos) << dir << ": " << error;
  }
}

}  // namespace
}  // namespace zt

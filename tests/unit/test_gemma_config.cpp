// Gemma (GemmaForCausalLM, model_type "gemma"): Llama's model whose norms scale by (1 + weight),
// whose embedding's output is multiplied by sqrt(hidden_size) and whose MLP is GeGLU with GELU's
// tanh form. What GemmaConfig (transformers 4.46) reads, with its own defaults where a file leaves
// keys out, which activation keys are accepted (google/gemma-2b's first config.json says "gelu"
// in hidden_act, which 4.46 ignores), what is refused, and what is written back. The model is
// checked against transformers in oracle_hf_gemma; the published CodeGemma-7b-it config.json in
// HfConfigCorpus.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"
#include "support/error_text.h"
#include "util/bf16.h"

namespace zt {
namespace {

// google/gemma-2b's config.json as first published (transformers 4.38): hidden_act "gelu", no
// hidden_activation, no tie_word_embeddings key.
nlohmann::json gemma_2b_json() {
  return {{"architectures", {"GemmaForCausalLM"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", 2},
          {"eos_token_id", 1},
          {"head_dim", 256},
          {"hidden_act", "gelu"},
          {"hidden_size", 2048},
          {"initializer_range", 0.02},
          {"intermediate_size", 16384},
          {"max_position_embeddings", 8192},
          {"model_type", "gemma"},
          {"num_attention_heads", 8},
          {"num_hidden_layers", 18},
          {"num_key_value_heads", 1},
          {"pad_token_id", 0},
          {"rms_norm_eps", 1e-06},
          {"rope_scaling", nullptr},
          {"rope_theta", 10000.0},
          {"torch_dtype", "bfloat16"},
          {"transformers_version", "4.38.0.dev0"},
          {"use_cache", true},
          {"vocab_size", 256000}};
}

ModelConfig read(const nlohmann::json& j) {
  return ModelConfig::from_hf_json(j, "gemma.json", UnknownConfigKeys::kRefuse);
}

std::string error_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = gemma_2b_json();
  j[key] = value;
  return error_of([&] { read(j); });
}

TEST(GemmaConfig, Gemma2bIsReadAsGemmaWithItsDefaultsAndWrittenBack) {
  const ModelConfig c = read(gemma_2b_json());
  EXPECT_EQ(c.model_type(), "gemma");
  EXPECT_EQ(c.norm_weight_offset, 1.0f);
  EXPECT_TRUE(c.scaled_embeddings);
  EXPECT_EQ(c.mlp_activation, GluActivation::kGeluTanh);
  EXPECT_TRUE(c.tie_word_embeddings);  // GemmaConfig's default: the file has no key
  EXPECT_EQ(c.head_dim(), 256);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.padding_token, 0);
  // gemma-2b's card: 2,506,172,416 parameters (tied embeddings counted once).
  EXPECT_EQ(ParamLayout(c).total_numel(), 2506172416);
  const nlohmann::json written = c.to_hf_json();
  EXPECT_EQ(written.at("architectures"), nlohmann::json({"GemmaForCausalLM"}));
  EXPECT_EQ(written.at("hidden_act"), "gelu_pytorch_tanh");
  EXPECT_EQ(written.at("hidden_activation"), "gelu_pytorch_tanh");
  EXPECT_EQ(written.at("head_dim"), 256);
  EXPECT_EQ(read(written), c);
  // Without a padding row, null is written: GemmaConfig reads an absent key as 0.
  ModelConfig unpadded = c;
  unpadded.padding_token = -1;
  EXPECT_TRUE(unpadded.to_hf_json().at("pad_token_id").is_null());
  EXPECT_EQ(read(unpadded.to_hf_json()), unpadded);
}

TEST(GemmaConfig, AbsentKeysTakeGemmaConfigsDefaults) {
  nlohmann::json j = gemma_2b_json();
  for (const char* key : {"head_dim", "num_key_value_heads", "pad_token_id", "rope_theta"})
    j.erase(key);
  j["num_attention_heads"] = 16;  // gemma-7b's, a multiple of the default 16 key/value heads
  const ModelConfig c = read(j);
  EXPECT_EQ(c.head_dim(), 256);
  EXPECT_EQ(c.num_kv_heads, 16);
  EXPECT_EQ(c.padding_token, 0);
  EXPECT_EQ(c.rope_theta, 10000.0);
}

// transformers 4.46 (and back to 4.38) reads hidden_activation (null: the tanh form), 4.49
// hidden_act. The published values ("gelu" in hidden_act, "gelu_pytorch_tanh" in either) are read
// as the tanh form; another activation is refused naming the key.
TEST(GemmaConfig, ActivationKeysAsPublishedAreReadOthersRefused) {
  for (const nlohmann::json& activation : {nlohmann::json(), nlohmann::json("gelu_pytorch_tanh")}) {
    nlohmann::json j = gemma_2b_json();
    j["hidden_activation"] = activation;
    EXPECT_EQ(read(j).mlp_activation, GluActivation::kGeluTanh) << activation;
  }
  nlohmann::json tanh_act = gemma_2b_json();
  tanh_act["hidden_act"] = "gelu_pytorch_tanh";
  EXPECT_EQ(read(tanh_act).mlp_activation, GluActivation::kGeluTanh);
  EXPECT_NE(error_with("hidden_activation", "gelu")
                .find("gemma.json: 'hidden_activation': "
                      "\"gelu\" is not implemented"),
            std::string::npos);
  EXPECT_NE(error_with("hidden_act", "silu")
                .find("gemma.json: 'hidden_act': \"silu\" is not "
                      "implemented"),
            std::string::npos);
}

TEST(GemmaConfig, WhatGemmaDoesNotComputeIsRefusedNamingTheKey) {
  EXPECT_NE(error_with("rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}})
                .find("'rope_scaling' is not applied by transformers' Gemma"),
            std::string::npos);
  EXPECT_NE(error_with("sliding_window", 4096).find("'sliding_window' 4096 outside a Mistral"),
            std::string::npos);
  EXPECT_NE(error_with("mlp_bias", true).find("'mlp_bias'"), std::string::npos);
  EXPECT_NE(error_with("head_dim", nullptr).find("'head_dim' is null"), std::string::npos);
  // Gemma's parts come together: a Llama with one of them is no Hugging Face architecture.
  ModelConfig part = read(gemma_2b_json());
  part.scaled_embeddings = false;
  EXPECT_NE(error_of([&] { part.validate(); }).find("come together"), std::string::npos);
}

// The embedding's factor: sqrt(hidden_size) rounded to the activations' type, as transformers
// makes it a tensor of the hidden states' dtype (sqrt(3072) = 55.43 is 55.5 in bf16).
TEST(GemmaConfig, EmbeddingScaleIsTheSquareRootInTheActivationsType) {
  ModelConfig c = read(gemma_2b_json());
  c.hidden_size = 3072;
  EXPECT_EQ(c.embedding_scale(DType::kFloat32), static_cast<float>(std::sqrt(3072.0)));
  EXPECT_EQ(c.embedding_scale(DType::kBf16), 55.5f);
  EXPECT_EQ(c.embedding_scale(DType::kFloat16),
            round_to_fp16(static_cast<float>(std::sqrt(3072.0))));
  c.scaled_embeddings = false;
  EXPECT_EQ(c.embedding_scale(DType::kBf16), 1.0f);
}

// `init` starts a Gemma norm's weight at 0, its scale (1 + weight) at 1, as GemmaRMSNorm does.
TEST(GemmaConfig, InitStartsTheNormWeightsAtZero) {
  ModelConfig c = preset_config("tiny");
  c.use_gemma_math();
  const ParamLayout layout(c);
  const TensorInfo& norm = layout.tensor(TensorRole::kFinalNorm);
  std::vector<float> values(static_cast<size_t>(norm.numel), 5.0f);
  init_tensor_range(c, norm, 1, 0, norm.numel, values.data());
  EXPECT_EQ(values, std::vector<float>(values.size(), 0.0f));
}

}  // namespace
}  // namespace zt

// Mistral Small 3.1 and 3.2 (Mistral3ForConditionalGeneration) are published as multimodal
// checkpoints whose language model is a Mistral (head_dim 128, no window): import reads that text
// model (docs/models.md, "Multimodal checkpoints"). What the wrapper's config yields, against the
// published Mistral-Small-3.1-24B-Instruct-2503 file, and what is refused. The import itself is
// checked against the text checkpoint in oracle_hf_mistral3_multimodal(_resaved).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/hf_multimodal_config.h"
#include "model/layout.h"
#include "support/hf_config_files.h"

namespace zt {
namespace {

const char* const kSmall31 = "mistralai--Mistral-Small-3.1-24B-Instruct-2503";

TEST(Mistral3Config, ThePublishedWrapperYieldsItsMistralTextModel) {
  const nlohmann::json published = published_config(kSmall31);
  const MultimodalWrapper* wrapper = multimodal_wrapper(published);
  ASSERT_TRUE(wrapper != nullptr);
  EXPECT_EQ(std::string(wrapper->model_type), "mistral3");
  const nlohmann::json text = multimodal_text_config(published, *wrapper, "config.json");
  EXPECT_EQ(text.at("architectures"), nlohmann::json::array({"MistralForCausalLM"}));
  const ModelConfig c = read_strict(text, "config.json");
  // head_dim 128 (not 5120 / 32) and no window: written as a Llama, as Mistral-Nemo is.
  EXPECT_EQ(c.model_type(), "llama");
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.rope_theta, 1e9);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(ParamLayout(c).total_numel(), 23572403200);
  // Without the architectures key the wrapper is still known by model_type, and without
  // model_type by architectures.
  nlohmann::json by_type = published;
  by_type.erase("architectures");
  EXPECT_EQ(multimodal_wrapper(by_type), wrapper);
  nlohmann::json by_class = published;
  by_class.erase("model_type");
  EXPECT_EQ(multimodal_wrapper(by_class), wrapper);
  // An empty text_config is MistralConfig's defaults: Mistral-7B's shape (its card's
  // 7,241,732,096 parameters, as HfConfigCorpus reads Mistral-7B-v0.1's file).
  nlohmann::json empty = published;
  empty["text_config"] = nlohmann::json::object();
  EXPECT_EQ(ParamLayout(read_strict(multimodal_text_config(empty, *wrapper, "e.json"), "e.json"))
                .total_numel(),
            7241732096);
  // A text config that leaves sliding_window out takes MistralConfig's default window (4096).
  nlohmann::json sparse = published;
  sparse["text_config"].erase("sliding_window");
  EXPECT_EQ(
      read_strict(multimodal_text_config(sparse, *wrapper, "c.json"), "c.json").sliding_window,
      4096);
}

TEST(Mistral3Config, AnotherTextModelOrNoneIsRefusedNamingTheFile) {
  const nlohmann::json published = published_config(kSmall31);
  const MultimodalWrapper& wrapper = *multimodal_wrapper(published);
  // A text model other than Mistral's and Ministral 3's (test_ministral3_config.cpp).
  nlohmann::json mixtral = published;
  mixtral["text_config"]["model_type"] = "mixtral";
  EXPECT_NE(error_of([&] { multimodal_text_config(mixtral, wrapper, "m.json"); })
                .find("m.json: 'text_config' has model_type \"mixtral\", not \"mistral\" or "
                      "\"ministral3\""),
            std::string::npos);
  nlohmann::json without = published;
  without.erase("text_config");
  EXPECT_NE(error_of([&] { multimodal_text_config(without, wrapper, "m.json"); })
                .find("a Mistral 3 multimodal config (Mistral3ForConditionalGeneration) without "
                      "a 'text_config' object"),
            std::string::npos);
  // A quantized release says so at the top level: refused as the text model's key.
  nlohmann::json quantized = published;
  quantized["quantization_config"] = {{"quant_method", "fp8"}};
  EXPECT_NE(error_of([&] {
              read_strict(multimodal_text_config(quantized, wrapper, "q.json"), "q.json");
            }).find("'quantization_config'"),
            std::string::npos);
}

}  // namespace
}  // namespace zt

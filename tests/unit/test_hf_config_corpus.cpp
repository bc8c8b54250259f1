// The config.json files of real published models (tests/data/hf_models, sources in its
// SOURCES.md: Llama 2, 3, 3.1, 3.2, Mistral, Qwen2, Qwen2.5, Qwen3, SmolLM2, TinyLlama, Phi-3,
// Phi-4-mini (RoPE on part of each head), SmolLM3 (layers without RoPE),
// Gemma 2 (gemma-2-9b-it: sandwich norms, soft caps), OLMo 2 (13B and its Instruct: norms after the
// attention and the MLP), Granite 3.3 (four scalars), GLM (glm-4-9b-chat's GlmForCausalLM form:
// RoPE on half of each head, in adjacent pairs; glm-edge-1.5b-chat: on all of it), Gemma 3
// (gemma-3-270m; gemma-3-1b-it re-saved
// by 4.52.4), Mistral Small 3.1 (a multimodal checkpoint: its text model read), and re-saves by
// transformers 4.46 (Phi-3.5-mini, longrope), 4.56, 4.57 and 5.7, and unsloth's of CodeGemma-7b-it
// (Gemma)) are read with the keys as published:
//   - every one is accepted, also under --strict-config: each key in them is one zerotrain reads
//     or knows to leave the model unchanged, except the keys listed as unknown for a file
//     (Phi-3's auto_map, which names the repository's own modelling code), which are accepted
//     with a warning and refused under --strict-config;
//   - the model each describes has the parameter count its model card states (tied embeddings
//     counted once), and the family, tie, RoPE base and scaling the file says;
//   - llama3 rope scaling, written as GGUF's per-frequency factors, reads back as the published
//     parameters;
//   - every config.json of the corpus is in the table below, so a file added without its expected
//     figures fails.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/hf_multimodal_config.h"
#include "model/layout.h"
#include "model/rope_freq_factors.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

struct Published {
  int64_t parameters;
  const char* model_type;
  bool tied;
  double rope_theta;
  RopeScaling scaling;
};

// The models' stated sizes (model cards; 7,241,732,096 for Mistral-7B-v0.1, 8,030,261,248 for
// Llama-3-8B, ...), not zerotrain's output.
const std::map<std::string, Published>& corpus() {
  using R = RopeScaling;
  static const std::map<std::string, Published> table = {
      {"HuggingFaceTB--SmolLM2-135M", {134515008, "llama", true, 100000, R::kNone}},
      {"HuggingFaceTB--SmolLM2-135M-Instruct", {134515008, "llama", true, 100000, R::kNone}},
      {"HuggingFaceTB--SmolLM2-1.7B-Instruct", {1711376384, "llama", true, 130000, R::kNone}},
      // Its model.safetensors.index.json's total_parameters; tied, though its config.json has no
      // tie_word_embeddings key (SmolLM3Config's default).
      {"HuggingFaceTB--SmolLM3-3B", {3075098624, "smollm3", true, 5000000, R::kNone}},
      {"Qwen--Qwen2-0.5B", {494032768, "qwen2", true, 1000000, R::kNone}},
      {"Qwen--Qwen2.5-0.5B", {494032768, "qwen2", true, 1000000, R::kNone}},
      {"Qwen--Qwen2.5-0.5B-Instruct", {494032768, "qwen2", true, 1000000, R::kNone}},
      {"Qwen--Qwen2.5-1.5B-Instruct", {1543714304, "qwen2", true, 1000000, R::kNone}},
      {"Qwen--Qwen2.5-7B-Instruct", {7615616512, "qwen2", false, 1000000, R::kNone}},
      {"Qwen--Qwen3-0.6B", {596049920, "qwen3", true, 1000000, R::kNone}},
      {"Qwen--Qwen3-8B", {8190735360, "qwen3", false, 1000000, R::kNone}},
      // Its card's 1.7B (1.4B without the embedding); 1,720,574,976 from the shapes its config
      // states (tied embeddings). Its rope_theta is written as an integer.
      {"Qwen--Qwen3-1.7B", {1720574976, "qwen3", true, 1000000, R::kNone}},
      {"TinyLlama--TinyLlama-1.1B-Chat-v1.0", {1100048384, "llama", false, 10000, R::kNone}},
      {"meta-llama--Llama-2-7b-hf", {6738415616, "llama", false, 10000, R::kNone}},
      {"meta-llama--Meta-Llama-3-8B", {8030261248, "llama", false, 500000, R::kNone}},
      {"meta-llama--Meta-Llama-3-8B-Instruct", {8030261248, "llama", false, 500000, R::kNone}},
      {"meta-llama--Llama-3.1-8B", {8030261248, "llama", false, 500000, R::kLlama3}},
      {"meta-llama--Llama-3.1-8B-Instruct", {8030261248, "llama", false, 500000, R::kLlama3}},
      {"meta-llama--Llama-3.2-1B", {1235814400, "llama", true, 500000, R::kLlama3}},
      {"meta-llama--Llama-3.2-3B", {3212749824, "llama", true, 500000, R::kLlama3}},
      {"meta-llama--Llama-3.2-1B-Instruct", {1235814400, "llama", true, 500000, R::kLlama3}},
      {"meta-llama--Llama-3.2-3B-Instruct", {3212749824, "llama", true, 500000, R::kLlama3}},
      {"mistralai--Mistral-7B-v0.1", {7241732096, "mistral", false, 10000, R::kNone}},
      {"mistralai--Mistral-7B-Instruct-v0.3", {7248023552, "llama", false, 1000000, R::kNone}},
      // Its card's 12B; 12,247,782,400 from the shapes its config states (head_dim 128, not
      // 5120 / 32; no window, so written as a Llama).
      {"mistralai--Mistral-Nemo-Instruct-2407", {12247782400, "llama", false, 1000000, R::kNone}},
      // Mistral3ForConditionalGeneration: its text model, 23,572,403,200 from the shapes its
      // text_config states (its card's 24B with the vision tower; head_dim 128, no window).
      {"mistralai--Mistral-Small-3.1-24B-Instruct-2503",
       {23572403200, "llama", false, 1000000000, R::kNone}},
      {"microsoft--Phi-3-mini-4k-instruct", {3821079552, "phi3", false, 10000, R::kNone}},
      // Its card's 3.8B; 3,836,021,760 from the shapes its config states (tied embeddings).
      {"microsoft--Phi-4-mini-instruct", {3836021760, "phi3", true, 10000, R::kLongrope}},
      // unsloth's re-save of CodeGemma-7b-it (transformers 4.44.2): Gemma-7B's shape, its card's
      // 8.54B; tied, though its config.json has no tie_word_embeddings key (GemmaConfig's
      // default).
      {"resaved-unsloth--google--codegemma-7b-it", {8537680896, "gemma", true, 10000, R::kNone}},
      // Its card's 9.24B (9,241,705,984: its safetensors index's 18,483,411,968 bytes of bf16);
      // tied, though its config.json has no tie_word_embeddings key (Gemma2Config's default).
      {"google--gemma-2-9b-it", {9241705984, "gemma2", true, 10000, R::kNone}},
      // Gemma 3's text models (q/k norms, 512-token windows on five layers in six, RoPE base
      // 10000 there and rope_theta on the others): 999,885,952 and 268,098,176 from the shapes
      // their configs state (their cards' 1B and 270M; tied, Gemma3TextConfig's default).
      {"resaved-transformers-4.52.4--google--gemma-3-1b-it",
       {999885952, "gemma3_text", true, 1000000, R::kNone}},
      {"google--gemma-3-270m", {268098176, "gemma3_text", true, 1000000, R::kNone}},
      // OLMo 2 13B (norms after attention and MLP, q/k norms over whole projections): its
      // safetensors index's 54,864,793,600 bytes of fp32; its card's 13B.
      {"allenai--OLMo-2-1124-13B", {13716198400, "olmo2", false, 500000, R::kNone}},
      {"allenai--OLMo-2-1124-13B-Instruct", {13716198400, "olmo2", false, 500000, R::kNone}},
      // OLMo 3.1 32B Instruct (OLMo 2's model with 4096-key windows on three layers in four, yarn
      // on the others): 32,233,522,176 from the shapes its config states; its card's 32B.
      {"allenai--Olmo-3.1-32B-Instruct", {32233522176, "olmo3", false, 500000, R::kYarn}},
      // Granite 3.3 8B Instruct (its four scalars on Llama's model): 8,170,864,640 from the shapes
      // its config states (tied embeddings); its card's 8B.
      {"ibm-granite--granite-3.3-8b-instruct", {8170864640, "granite", true, 10000000, R::kNone}},
      // GLM-4-9B-Chat as GlmForCausalLM (q/k/v biases, gate/up fused in the file): 9,399,951,360
      // from the shapes its config states (untied), its card's 9B; glm-edge-1.5b-chat (no
      // biases, tied): 1,472,055,296, its name's 1.5B.
      {"THUDM--glm-4-9b-chat-rev-9918c3f", {9399951360, "glm", false, 10000, R::kNone}},
      {"THUDM--glm-edge-1.5b-chat", {1472055296, "glm", true, 10000, R::kNone}},
      // Ministral 3 8B's text model (yarn, llama_4_scaling_beta; untied): 8,489,553,920 from the
      // shapes its text_config states, from a user's copy of the instruct config without its
      // FP8 quantization_config (the -BF16 release's shape).
      {"third-party-copy--mistralai--Ministral-3-8B-Instruct-2512",
       {8489553920, "ministral3", false, 1000000, R::kYarn}},
      {"resaved-transformers-4.56.0--TinyLlama--TinyLlama-1.1B-Chat-v1.0",
       {1100048384, "llama", false, 10000, R::kNone}},
      {"resaved-transformers-4.57.1--Qwen--Qwen3-8B",
       {8190735360, "qwen3", false, 1000000, R::kNone}},
      {"resaved-transformers-5.7.0--Qwen--Qwen2.5-1.5B-Instruct",
       {1543714304, "qwen2", true, 1000000, R::kNone}},
      {"resaved-transformers-4.46.3--microsoft--Phi-3.5-mini-instruct",
       {3821079552, "phi3", false, 10000, R::kLongrope}},
      {"resaved-transformers-5.7.0--meta-llama--Llama-3.2-3B-Instruct",
       {3212749824, "llama", true, 500000, R::kLlama3}},
  };
  return table;
}

// Keys of a published file that zerotrain neither reads nor knows to be inert.
std::vector<std::string> expected_unknown_keys(const std::string& name) {
  if (name.find("Phi-3") != std::string::npos) return {"auto_map"};
  if (name.find("unsloth") != std::string::npos) return {"unsloth_version"};  // the re-saver's
  // Phi-4-mini's: its remote code's keys, which transformers' Phi3 does not read.
  if (name.find("Phi-4-mini") != std::string::npos)
    return {"auto_map", "full_attn_mod", "interpolate_factor", "lm_head_bias"};
  return {};
}

TEST(HfConfigCorpus, PublishedConfigsAreReadWithTheirShapes) {
  const fs::path root = fs::path(ZT_SOURCE_DIR) / "tests/data/hf_models";
  std::set<std::string> seen;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory() || !fs::exists(entry.path() / "config.json")) continue;
    const std::string name = entry.path().filename();
    SCOPED_TRACE(name);
    seen.insert(name);
    const auto expected = corpus().find(name);
    ASSERT_NE(expected, corpus().end()) << "a corpus directory without its expected figures";
    const std::string file = (entry.path() / "config.json").string();
    std::ifstream in(file);
    nlohmann::json published = nlohmann::json::parse(in);
    // A multimodal checkpoint's text model, as import reads it.
    if (const MultimodalWrapper* wrapper = multimodal_wrapper(published))
      published = multimodal_text_config(published, *wrapper, file);
    EXPECT_EQ(hf_config_unknown_keys(published), expected_unknown_keys(name));
    const UnknownConfigKeys strictness = expected_unknown_keys(name).empty()
                                             ? UnknownConfigKeys::kRefuse
                                             : UnknownConfigKeys::kAccept;
    ModelConfig c;
    ASSERT_NO_THROW(c = ModelConfig::from_hf_json(published, file, strictness));
    const Published& p = expected->second;
    EXPECT_EQ(ParamLayout(c).total_numel(), p.parameters);
    EXPECT_EQ(c.model_type(), p.model_type);
    EXPECT_EQ(c.tie_word_embeddings, p.tied);
    EXPECT_EQ(c.rope_theta, p.rope_theta);
    EXPECT_EQ(c.rope_scaling.type, p.scaling);
    // SmolLM3-3B's every fourth layer takes no RoPE; the others' every layer rotates.
    EXPECT_EQ(c.layers_without_rope.size(), name.find("SmolLM3") != std::string::npos ? 9u : 0u);
    // Phi-4-mini rotates 96 of each head's 128 elements, GLM-4-9B-Chat 64 (GlmConfig's default
    // half); the others, whole heads.
    EXPECT_EQ(c.rotary_dims(), name.find("Phi-4-mini") != std::string::npos      ? 96
                               : name.find("glm-4-9b-chat") != std::string::npos ? 64
                                                                                 : c.head_dim());
    EXPECT_EQ(c.rope().interleaved, name.find("glm") != std::string::npos);
    // What was read is what zerotrain writes back.
    EXPECT_EQ(ModelConfig::from_hf_json(c.to_hf_json(), "again"), c);
    // Through GGUF, where llama3 scaling travels as llama.cpp's per-frequency factors, the
    // published parameters come back.
    if (c.rope_scaling.type == RopeScaling::kLlama3) {
      EXPECT_EQ(llama3_scaling_from_freq_factors(llama3_rope_freq_factors(c), c.rope_theta,
                                                 c.head_dim(), file),
                c.rope_scaling);
    }
  }
  EXPECT_EQ(seen.size(), corpus().size()) << "a table entry without its directory";
}

// A published config with its layer count made hostile: refused where the count is read, before
// any per-layer list (SmolLM3's layers without RoPE, one entry per layer) is built.
TEST(HfConfigCorpus, AHostileLayerCountIsRefusedBeforeAnyPerLayerList) {
  std::ifstream in(fs::path(ZT_SOURCE_DIR) / "tests/data/hf_models/HuggingFaceTB--SmolLM3-3B" /
                   "config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["num_hidden_layers"] = int64_t{2000000000};
  try {
    ModelConfig::from_hf_json(j, "SmolLM3-3B/config.json");
    ADD_FAILURE() << "two billion layers accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("SmolLM3-3B/config.json: num_hidden_layers must be 1 to 65536"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace zt

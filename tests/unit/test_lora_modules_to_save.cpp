// PEFT's modules_to_save (app/lora_options.h, checkpoint/peft_adapter.h): a name selects every
// module whose full name ends with it, as peft.utils.other._set_trainable selects it; a name
// that would train a decoder layer's own tensor, selects nothing, names the LM head a model ties
// to its embedding, or trains a tied embedding without ensure_weight_tying is refused naming the
// file and the name; and the adapter directory a run writes lists the modules that trained (and
// ensure_weight_tying for a tied embedding), so PEFT and --lora-init-from train them again. The
// training through PEFT is tests/oracle/test_lora_io.py's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/error_text.h"
#include "app/lora_options.h"
#include "checkpoint/peft_adapter.h"
#include "io/peft_adapter_file.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/trainable.h"

namespace zt {
namespace {

ModelConfig tiny_lora(bool tied) {
  ModelConfig c = preset_config("tiny");
  c.tie_word_embeddings = tied;
  c.lora.rank = 4;
  c.lora.targets = LoraSpec::parse_targets({"q_proj"}, "test");
  return c;
}

// The tensors the patterns of `names` select.
std::vector<std::string> selected(const ParamLayout& layout, std::vector<std::string> names,
                                  bool ensure_weight_tying = false) {
  LoraSpec spec = layout.config().lora;
  spec.modules_to_save = std::move(names);
  spec.ensure_weight_tying = ensure_weight_tying;
  const TrainableSet set = TrainableSet::from_patterns(
      layout, modules_to_save_patterns(spec, layout, "cfg/adapter_config.json"), {});
  std::vector<std::string> out;
  for (const TensorInfo& t : layout.tensors())
    if (!t.is_lora() && set.trains(layout.index_of(t))) out.push_back(t.name);
  return out;
}

TEST(LoraModulesToSave, ANameSelectsTheModulesWhoseNamesEndWithIt) {
  const ParamLayout untied(tiny_lora(false));
  EXPECT_EQ(selected(untied, {"lm_head"}), std::vector<std::string>{"lm_head.weight"});
  EXPECT_EQ(selected(untied, {"embed_tokens", "model.norm"}),
            (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"}));
  EXPECT_EQ(selected(untied, {"_head"}), std::vector<std::string>{"lm_head.weight"});  // a suffix
  EXPECT_TRUE(selected(untied, {}).empty());
  // A tied embedding trains as the shared matrix, which PEFT does with ensure_weight_tying.
  const ParamLayout tied(tiny_lora(true));
  EXPECT_EQ(selected(tied, {"embed_tokens"}, /*ensure_weight_tying=*/true),
            std::vector<std::string>{"model.embed_tokens.weight"});
}

TEST(LoraModulesToSave, NamesThatWouldTrainOtherTensorsOrNoneAreRefusedNamingTheFile) {
  const ParamLayout untied(tiny_lora(false)), tied(tiny_lora(true));
  // "norm" ends every layer's norms too: PEFT would train them; with LoRA they stay frozen.
  const std::string norm = error_of([&] { selected(untied, {"norm"}); });
  EXPECT_NE(norm.find("cfg/adapter_config.json: modules_to_save names 'norm', which selects "
                      "model.layers.0.input_layernorm"),
            std::string::npos)
      << norm;
  EXPECT_NE(norm.find("the final norm is 'model.norm'"), std::string::npos) << norm;
  const std::string head = error_of([&] { selected(tied, {"lm_head"}); });
  EXPECT_NE(head.find("modules_to_save names 'lm_head', but this model ties its LM head to "
                      "model.embed_tokens (tie_word_embeddings)"),
            std::string::npos)
      << head;
  // Without ensure_weight_tying PEFT trains an untied copy of a tied embedding.
  const std::string copy = error_of([&] { selected(tied, {"embed_tokens"}); });
  EXPECT_NE(copy.find("modules_to_save names 'embed_tokens' on a model that ties its LM head to "
                      "the embedding: PEFT would train a copy"),
            std::string::npos)
      << copy;
  EXPECT_NE(copy.find("ensure_weight_tying: true (PEFT 0.18 and later)"), std::string::npos);
  const std::string none = error_of([&] { selected(untied, {"score"}); });
  EXPECT_NE(none.find("modules_to_save names 'score', which selects no module holding a tensor"),
            std::string::npos)
      << none;
}

// The adapter_config.json that write_peft_adapter_dir writes for `layout` with `trainable`.
nlohmann::json written_config(const ParamLayout& layout, const std::vector<std::string>& trainable,
                              const std::string& dir) {
  const TrainableSet set = TrainableSet::from_patterns(layout, trainable, {});
  write_peft_adapter_dir(
      dir, layout, set, "base",
      [](const TensorInfo&, int64_t, int64_t count, float* out) {
        std::fill(out, out + count, 0.5f);
      },
      /*overwrite=*/true);
  std::ifstream in(dir + "/" + kPeftConfigFile);
  return nlohmann::json::parse(in);
}

TEST(LoraModulesToSave, TheAdapterDirectoryListsTheModulesThatTrained) {
  const ParamLayout layout(tiny_lora(false));
  const std::string dir = ::testing::TempDir() + "zt_modules_to_save_" +
                          std::to_string(::testing::UnitTest::GetInstance()->random_seed());
  const auto written_modules = [&](const std::vector<std::string>& trainable) {
    const nlohmann::json config = written_config(layout, trainable, dir);
    EXPECT_FALSE(config.contains("ensure_weight_tying"));  // untied: PEFT 0.13 loads it
    return config.at("modules_to_save");
  };
  // --trainable lm_head given on the command line: the file says so, as a full module name.
  EXPECT_EQ(written_modules({"lm_head"}), nlohmann::json({"lm_head"}));
  EXPECT_EQ(written_modules({"embed_tokens", "model\\.norm"}),
            nlohmann::json({"model.embed_tokens", "model.norm"}));
  EXPECT_TRUE(written_modules({}).is_null());
  // Read back as a specification, the list selects the same tensors.
  const LoraSpec back = LoraSpec::from_peft_file(dir + "/" + kPeftConfigFile);
  EXPECT_TRUE(back.modules_to_save.empty());
  written_modules({"embed_tokens", "model\\.norm"});
  EXPECT_EQ(selected(layout, LoraSpec::from_peft_file(dir + "/" + kPeftConfigFile).modules_to_save),
            (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"}));
  // A tied model's embedding trained in full: the file keeps the tie, and reads back as it.
  const ParamLayout tied(tiny_lora(true));
  const nlohmann::json config = written_config(tied, {"embed_tokens"}, dir);
  EXPECT_EQ(config.at("modules_to_save"), nlohmann::json({"model.embed_tokens"}));
  EXPECT_EQ(config.at("ensure_weight_tying"), true);
  const LoraSpec tied_back = LoraSpec::from_peft_file(dir + "/" + kPeftConfigFile);
  EXPECT_EQ(selected(tied, tied_back.modules_to_save, tied_back.ensure_weight_tying),
            std::vector<std::string>{"model.embed_tokens.weight"});
  // Opened for eval, generate or a merge: with the tie kept it reads; without it (PEFT 0.13's
  // copy, applied to the embedding alone) it is refused naming the file and the tensor.
  ModelConfig tied_model = tiny_lora(true);
  tied_model.lora = tied_back;
  EXPECT_NO_THROW(PeftAdapterReader(dir, tied_model));
  tied_model.lora.ensure_weight_tying = false;
  EXPECT_NE(error_of([&] { PeftAdapterReader(dir, tied_model); })
                .find("adapter_model.safetensors: tensor "
                      "'base_model.model.model.embed_tokens.weight' is a trained copy "
                      "of the embedding, which this model ties to its LM head"),
            std::string::npos);
  EXPECT_FALSE(written_config(tied, {}, dir).contains("ensure_weight_tying"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zt

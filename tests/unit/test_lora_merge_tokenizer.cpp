// The tokenizer a LoRA merge ships (io/lora_merge.h): the adapter directory's when it holds
// tokenizer.json (a LoRA run's OUT/final carries its data's tokenizer and chat template), with
// the base's generation_config.json where the adapter directory has none (PEFT and TRL save the
// tokenizer beside an adapter, not the generation config); else the base's. generate --adapter
// reads its EOS list from the same generation config. An adapter tokenizer that encodes unlike
// the base's is warned about.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "checkpoint/peft_adapter.h"
#include "io/lora_merge.h"
#include "io/tokenizer_files.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/trainable.h"
#include "test_io_support.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

TEST(LoraMergeTokenizer, TheAdapterDirectorysTokenizerShipsWithTheBasesGenerationConfig) {
  const testing::TempDir tmp;
  const std::string base = tmp / "base", adapter = tmp / "adapter";
  const testing::RunResult r = testing::run_zerotrain("init --preset tiny --seed 3 --out " + base);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ModelConfig config = preset_config("tiny");
  config.lora.rank = 4;
  config.lora.targets = LoraSpec::parse_targets({"q_proj"}, "test");
  const ParamLayout layout(config);
  write_peft_adapter_dir(
      adapter, layout, TrainableSet::from_patterns(layout, {}, {}), base,
      [](const TensorInfo&, int64_t, int64_t count, float* out) {
        std::fill(out, out + count, 0.25f);
      },
      /*overwrite=*/false);
  // Without a tokenizer beside the adapter, the base's.
  testing::write_file(base + "/tokenizer.json", R"({"model": {}})");
  testing::write_file(base + "/tokenizer_config.json", R"({"eos_token": "e"})");
  testing::write_file(base + "/generation_config.json", R"({"eos_token_id": [1, 2]})");
  EXPECT_EQ(merged_model_tokenizer_dir(base, adapter), base);
  EXPECT_EQ(merged_model_generation_config_dir(base, adapter), base);
  write_merged_model_dir(base, adapter, tmp / "merged_base", /*overwrite=*/false);
  EXPECT_EQ(testing::read_file(tmp / "merged_base/tokenizer_config.json"), R"({"eos_token": "e"})");
  // With one (the base's tokenizer and a chat template, as a run on --chat-template-file data
  // writes it, without a generation config): the adapter's files and the base's generation
  // config, no warning.
  TokenizerFiles chat = read_tokenizer_files(base);
  chat.files.erase("generation_config.json");
  replace_chat_template(chat, "{{ messages }}", "test");
  for (const auto& [name, text] : chat.files) testing::write_file(adapter + "/" + name, text);
  EXPECT_EQ(merged_model_tokenizer_dir(base, adapter), adapter);
  EXPECT_EQ(merged_model_generation_config_dir(base, adapter), base);  // what generate reads
  ::testing::internal::CaptureStderr();
  write_merged_model_dir(base, adapter, tmp / "merged", /*overwrite=*/false);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(testing::read_file(tmp / "merged/chat_template.jinja"), "{{ messages }}");
  EXPECT_EQ(testing::read_file(tmp / "merged/tokenizer_config.json"),
            chat.files.at("tokenizer_config.json"));
  EXPECT_EQ(testing::read_file(tmp / "merged/generation_config.json"),
            R"({"eos_token_id": [1, 2]})");
  // An adapter directory with a generation config of its own gives it (generate's EOS list).
  testing::write_file(adapter + "/generation_config.json", R"({"eos_token_id": 3})");
  EXPECT_EQ(merged_model_generation_config_dir(base, adapter), adapter);
  write_merged_model_dir(base, adapter, tmp / "merged_own", /*overwrite=*/false);
  EXPECT_EQ(testing::read_file(tmp / "merged_own/generation_config.json"),
            R"({"eos_token_id": 3})");
  // An adapter tokenizer that encodes unlike the base's ships, with a warning naming both.
  testing::write_file(adapter + "/tokenizer.json", R"({"model": {"extended": true}})");
  ::testing::internal::CaptureStderr();
  write_merged_model_dir(base, adapter, tmp / "merged_other", /*overwrite=*/false);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("warning: the tokenizer of adapter '" + adapter + "' differs from base '" +
                        base + "'"),
            std::string::npos)
      << warned;
  EXPECT_EQ(testing::read_file(tmp / "merged_other/tokenizer.json"),
            R"({"model": {"extended": true}})");
}

}  // namespace
}  // namespace zt

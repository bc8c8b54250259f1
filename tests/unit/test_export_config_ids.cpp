// An export's config.json carries generation_config.json's bos/eos ids (io/tokenizer_files.h
// generation_token_ids), as a Hub checkpoint's does: transformers reads them there where no
// generation config is loaded. A list of EOS ids (Llama 3.1's, GLM's three) is kept a list; a
// model without tokenizer files gets none; an unreadable generation_config.json is refused
// naming the model directory. oracle_hf_tokenizer checks the ids through transformers'
// AutoConfig.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "io/tokenizer_files.h"
#include "test_io_support.h"
#include "util/error.h"

namespace zt {
namespace {

TEST(ExportConfigIds, GenerationConfigIdsAreReadAsTheyAreWritten) {
  const auto ids = [](const std::string& generation) {
    return generation_token_ids({{"generation_config.json", generation}}, "m");
  };
  const auto refusal = [&](const std::string& generation) {
    try {
      ids(generation);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(ids(R"({"bos_token_id": 0, "eos_token_id": [151329, 151336, 151338]})"),
            nlohmann::json::parse(R"({"bos_token_id": 0, "eos_token_id": [151329, 151336,
                                   151338]})"));
  // null is none, and every other key is left (pad_token_id is the model's).
  EXPECT_EQ(ids(R"({"bos_token_id": null, "eos_token_id": 2, "pad_token_id": 3})"),
            nlohmann::json::parse(R"({"eos_token_id": 2})"));
  EXPECT_EQ(generation_token_ids({{"tokenizer.json", "{}"}}, "m"), nlohmann::json::object());
  // An id past a small test model's vocabulary is carried (Phi3Config's default 32000 is written
  // so for a model of 256 tokens); what is no id is refused naming the file and the key.
  EXPECT_EQ(ids(R"({"eos_token_id": 32000})"), nlohmann::json::parse(R"({"eos_token_id": 32000})"));
  for (const char* bad :
       {R"({"eos_token_id": []})", R"({"bos_token_id": -1})", R"({"eos_token_id": [1, "x"]})"}) {
    EXPECT_NE(refusal(bad).find("m/generation_config.json: '"), std::string::npos) << bad;
    EXPECT_NE(refusal(bad).find("not a token id (or a list of them)"), std::string::npos)
        << refusal(bad);
  }
  EXPECT_NE(refusal("{\"eos_token_id\": 2").find("m/generation_config.json: not a JSON object"),
            std::string::npos);
}

TEST(ExportConfigIds, SafetensorsExportWritesThemIntoConfigJson) {
  const testing::TempDir tmp;
  const std::string model = tmp / "model";
  testing::RunResult r = testing::run_zerotrain("init --preset tiny --seed 3 --out " + model);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_zerotrain("export " + model + " --format safetensors --out " + (tmp / "bare"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto bare = nlohmann::json::parse(testing::read_file(tmp / "bare/config.json"));
  EXPECT_FALSE(bare.contains("eos_token_id")) << bare.dump();
  testing::write_file(model + "/tokenizer.json", R"({"model": {}})");
  testing::write_file(model + "/generation_config.json",
                      R"({"bos_token_id": 5, "eos_token_id": [3, 4], "do_sample": true})");
  r = testing::run_zerotrain("export " + model + " --format safetensors --out " + (tmp / "hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto config = nlohmann::json::parse(testing::read_file(tmp / "hf/config.json"));
  EXPECT_EQ(config["bos_token_id"], 5);
  EXPECT_EQ(config["eos_token_id"], nlohmann::json::parse("[3, 4]"));
  config.erase("bos_token_id");
  config.erase("eos_token_id");
  EXPECT_EQ(config, bare);  // nothing else changes
  testing::write_file(model + "/generation_config.json", "[1]");
  r = testing::run_zerotrain("export " + model + " --format safetensors --out " + (tmp / "bad"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(model + "/generation_config.json: not a JSON object"), std::string::npos)
      << r.output;
  EXPECT_TRUE(testing::no_output_left(tmp / "bad"));
}

}  // namespace
}  // namespace zt

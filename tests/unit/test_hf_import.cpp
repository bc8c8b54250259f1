// zerotrain import (io/hf_import.h): a Hugging Face directory into a model directory.
//   - export → import gives back the model directory's bf16 tensors bit for bit (one file and
//     sharded with an index);
//   - BF16, F16 and F32 tensors: each value is its exact fp32 widening rounded once to bf16;
//     fp16 widening is exact, subnormals and extremes included;
//   - refusals naming the file and tensor or key, with no output directory left behind: a missing
//     tensor, a shape or dtype mismatch, a tensor the model lacks, a non-finite value, a truncated
//     file, a value beyond bf16's range, an index that disagrees with its shard or points outside
//     the directory, and config keys that would change the model (rope_scaling, biases, another
//     model_type, tied embeddings, Mistral without an explicit null window, quantized weights); an
//     unknown key is accepted and reported, and refused under UnknownConfigKeys::kRefuse
//     (--strict-config).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include "../support/error_text.h"
#include "io/hf_import.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "io/safetensors_export.h"
#include "io/weight_file.h"
#include "model/layout.h"
#include "test_io_support.h"
#include "util/bf16.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using testing::expect_failure_naming;
using testing::no_output_left;
using testing::q;
using testing::run_zerotrain;
using testing::TempDir;

// The stored values of one tensor in a hand-written HF directory.
struct StoredTensor {
  SafetensorsEntry entry;
  std::vector<uint8_t> bytes;
  std::vector<float> expected;  // what the model directory must hold (bf16-rounded, as fp32)
};

// Tensor i of the tiny layout in F32, F16 or BF16 (by i mod 3), random values.
StoredTensor make_tensor(const TensorInfo& t, int i) {
  static const char* const kTypes[] = {"F32", "F16", "BF16"};
  StoredTensor s;
  s.entry = {t.name, kTypes[i % 3], t.shape, 0, 0};
  std::mt19937 gen(static_cast<unsigned>(100 + i));
  std::normal_distribution<float> dist(0.0f, 0.5f);
  const auto n = static_cast<size_t>(t.numel);
  s.expected.resize(n);
  if (s.entry.dtype == "F32") {
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen);
    s.bytes.resize(n * 4);
    std::memcpy(s.bytes.data(), v.data(), n * 4);
    for (size_t k = 0; k < n; ++k) s.expected[k] = round_to_bf16(v[k]);
  } else {
    std::vector<uint16_t> v(n);
    for (uint16_t& x : v) {
      x = s.entry.dtype == "BF16" ? float_to_bf16(dist(gen))
                                  : static_cast<uint16_t>(gen() & 0xffffu);
      if (s.entry.dtype == "F16" && (x & 0x7c00u) == 0x7c00u) x &= 0xbfffu;  // finite only
    }
    s.bytes.resize(n * 2);
    std::memcpy(s.bytes.data(), v.data(), n * 2);
    for (size_t k = 0; k < n; ++k)
      s.expected[k] =
          round_to_bf16(s.entry.dtype == "BF16" ? bf16_to_float(v[k]) : fp16_to_float(v[k]));
  }
  return s;
}

void write_safetensors(const std::string& path, const std::vector<StoredTensor>& tensors) {
  std::vector<SafetensorsEntry> entries;
  for (const StoredTensor& t : tensors) entries.push_back(t.entry);
  SafetensorsFileWriter writer(path, entries);
  for (const StoredTensor& t : tensors) writer.append(t.bytes.data(), t.bytes.size());
  writer.finish();
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2);
}

// An HF directory of the tiny model: config.json plus `tensors` in one model.safetensors.
std::vector<StoredTensor> tiny_tensors() {
  const ParamLayout layout(preset_config("tiny"));
  std::vector<StoredTensor> out;
  for (size_t i = 0; i < layout.tensors().size(); ++i)
    out.push_back(make_tensor(layout.tensors()[i], static_cast<int>(i)));
  return out;
}

void write_hf_dir(const std::string& dir, const std::vector<StoredTensor>& tensors,
                  nlohmann::json config = preset_config("tiny").to_hf_json()) {
  fs::create_directories(dir);
  write_json(dir + "/config.json", config);
  write_safetensors(dir + "/" + kSafetensorsFile, tensors);
}

TEST(HfImport, ExportThenImportIsBitwise) {
  TempDir tmp;
  const ModelConfig config = preset_config("tiny");
  write_model_dir_from_init(tmp / "m", config, 5);
  for (uint64_t shard_limit : {uint64_t{1} << 30, uint64_t{40000}}) {  // one file, then shards
    SCOPED_TRACE("shard limit " + std::to_string(shard_limit));
    const std::string hf = tmp / ("hf" + std::to_string(shard_limit));
    const std::string back = tmp / ("back" + std::to_string(shard_limit));
    const SafetensorsExport exported = export_safetensors(tmp / "m", hf, shard_limit, false);
    EXPECT_EQ(exported.files.size() > 1, shard_limit < 100000);
    EXPECT_TRUE(is_hf_checkpoint_dir(hf));
    const HfImportResult r = import_hf_model(hf, back, uint64_t{1} << 30, false);
    EXPECT_EQ(r.config, config);
    EXPECT_EQ(r.source_files.size(), exported.files.size());
    EXPECT_EQ(r.rounded_tensors, 0);
    ModelDirReader original(tmp / "m"), imported(back);
    const ParamLayout layout(config);
    for (const TensorInfo& t : layout.tensors()) {
      std::vector<bf16_t> a(static_cast<size_t>(t.numel)), b(a.size());
      original.read_tensor_bf16(t.name, a.data());
      imported.read_tensor_bf16(t.name, b.data());
      EXPECT_EQ(a, b) << t.name;
    }
  }
}

TEST(HfImport, Bf16Fp16AndFp32TensorsAreRoundedOnce) {
  TempDir tmp;
  std::vector<StoredTensor> tensors = tiny_tensors();
  // An old checkpoint's RoPE buffer: not a weight, ignored and reported.
  StoredTensor inv_freq;
  inv_freq.entry = {"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {8}, 0, 0};
  inv_freq.bytes.assign(32, 0);
  tensors.push_back(inv_freq);
  nlohmann::json config = preset_config("tiny").to_hf_json();
  config["bos_token_id"] = 1;
  config["transformers_version"] = "4.46.0";
  write_hf_dir(tmp / "hf", tensors, config);
  const HfImportResult r = import_hf_model(tmp / "hf", tmp / "m", uint64_t{1} << 30, false);
  EXPECT_EQ(r.ignored_tensors, std::vector<std::string>{inv_freq.entry.name});
  EXPECT_NE(std::find(r.ignored_keys.begin(), r.ignored_keys.end(), "bos_token_id"),
            r.ignored_keys.end());
  EXPECT_GT(r.rounded_tensors, 0);
  ModelDirReader dir(tmp / "m");
  for (size_t i = 0; i + 1 < tensors.size(); ++i) {
    const StoredTensor& t = tensors[i];
    std::vector<float> got(t.expected.size());
    dir.read_tensor_f32(t.entry.name, got.data());
    EXPECT_EQ(got, t.expected) << t.entry.name << " (" << t.entry.dtype << ")";
  }
}

TEST(HfImport, Fp16WideningIsExact) {
  EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(fp16_to_float(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(fp16_to_float(0x8000), 0.0f);
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
  EXPECT_EQ(fp16_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7e00)));
  EXPECT_EQ(fp16_to_float(0x3555), 0.333251953125f);  // 1/3 in fp16
}

// Each bad directory is refused with a message naming what is wrong, and no output appears.
TEST(HfImport, BadCheckpointsAreRefusedNamingTheTensor) {
  TempDir tmp;
  const std::vector<StoredTensor> good = tiny_tensors();
  struct Case {
    const char* name;
    std::function<void(std::vector<StoredTensor>&)> damage;
    std::string expect;
  };
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  const std::vector<Case> cases = {
      {"missing", [&](auto& t) { std::erase_if(t, [&](auto& s) { return s.entry.name == q; }); },
       "has no tensor '" + q + "'"},
      {"shape",
       [&](auto& t) {
         for (auto& s : t)
           if (s.entry.name == q) s.entry.shape = {32, 128};
       },
       "tensor '" + q + "' has shape [32,128]"},
      {"dtype",
       [&](auto& t) {
         for (auto& s : t)
           if (s.entry.name == q) s.entry.dtype = s.bytes.size() == 4 * 64 * 64 ? "I32" : "I16";
       },
       "zerotrain reads BF16, F16 or F32"},
      {"extra",
       [&](auto& t) {
         StoredTensor b = t.back();
         b.entry.name = "model.layers.0.self_attn.q_proj.bias";
         t.push_back(b);
       },
       "has tensor 'model.layers.0.self_attn.q_proj.bias', which the model"},
      {"nan",
       [&](auto& t) {
         for (auto& s : t) {
           if (s.entry.name != q) continue;
           s.entry.dtype = "F32";
           std::vector<float> v(static_cast<size_t>(64 * 64), 0.5f);
           v[7] = std::numeric_limits<float>::quiet_NaN();
           s.bytes.assign(reinterpret_cast<uint8_t*>(v.data()),
                          reinterpret_cast<uint8_t*>(v.data() + v.size()));
         }
       },
       "tensor '" + q + "' holds a value that is not finite in bf16 at element 7"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<StoredTensor> tensors = good;
    c.damage(tensors);
    const std::string hf = tmp / (std::string("hf_") + c.name),
                      out = tmp / (std::string("m_") + c.name);
    write_hf_dir(hf, tensors);
    const std::string e = error_of([&] { import_hf_model(hf, out, uint64_t{1} << 30, false); });
    EXPECT_NE(e.find(c.expect), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(out)) << "a refused import left " << out;
  }
  // An F32 value beyond bf16's range (it would round to infinity).
  {
    std::vector<StoredTensor> tensors = good;
    for (auto& t : tensors) {
      if (t.entry.name != q) continue;
      t.entry.dtype = "F32";
      std::vector<float> v(static_cast<size_t>(64 * 64), 0.5f);
      v[3] = 3.4e38f;
      t.bytes.assign(reinterpret_cast<uint8_t*>(v.data()),
                     reinterpret_cast<uint8_t*>(v.data() + v.size()));
    }
    write_hf_dir(tmp / "hf_huge", tensors);
    const std::string e = error_of(
        [&] { import_hf_model(tmp / "hf_huge", tmp / "m_huge", uint64_t{1} << 30, false); });
    EXPECT_NE(e.find("not finite in bf16 at element 3"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(tmp / "m_huge"));
  }
  // An index that leaves out a tensor its shard holds, and one that points outside the directory.
  {
    // (The shard under another name: beside model.safetensors an index is not read.)
    write_hf_dir(tmp / "hf_index", good);
    const std::string shard = "model-00001-of-00001.safetensors";
    fs::rename(tmp / ("hf_index/" + std::string(kSafetensorsFile)), tmp / ("hf_index/" + shard));
    nlohmann::json map;
    for (const StoredTensor& t : good)
      if (t.entry.name != q) map[t.entry.name] = shard;
    write_json(tmp / ("hf_index/" + std::string(kSafetensorsIndexFile)), {{"weight_map", map}});
    std::string e = error_of(
        [&] { import_hf_model(tmp / "hf_index", tmp / "m_index", uint64_t{1} << 30, false); });
    EXPECT_NE(e.find("holds tensor '" + q + "', which the index does not map"), std::string::npos)
        << e;
    map[q] = "../elsewhere.safetensors";
    write_json(tmp / ("hf_index/" + std::string(kSafetensorsIndexFile)), {{"weight_map", map}});
    e = error_of(
        [&] { import_hf_model(tmp / "hf_index", tmp / "m_index", uint64_t{1} << 30, false); });
    EXPECT_NE(e.find("not a file name inside the directory"), std::string::npos) << e;
  }
  // A truncated file: the header's offsets no longer fit.
  write_hf_dir(tmp / "hf_cut", good);
  const std::string file = tmp / ("hf_cut/" + std::string(kSafetensorsFile));
  fs::resize_file(file, fs::file_size(file) - 10);
  const std::string e =
      error_of([&] { import_hf_model(tmp / "hf_cut", tmp / "m_cut", uint64_t{1} << 30, false); });
  EXPECT_NE(e.find(file), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(tmp / "m_cut"));
}

TEST(HfImport, ConfigKeysThatChangeTheModelAreRefusedByName) {
  TempDir tmp;
  const std::vector<StoredTensor> tensors = tiny_tensors();
  const nlohmann::json base = preset_config("tiny").to_hf_json();
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 8.0}}},
      {"mlp_bias", true},
      {"hidden_act", "gelu"},
      {"model_type", "mixtral"},
      {"architectures", {"Qwen2ForCausalLM"}},
      {"sliding_window", 0},
      {"use_sliding_window", true},
      {"head_dim", -4},
      {"layer_types", {"full_attention", "sliding_attention"}},
      {"use_mrope", true},
      {"attention_dropout", 0.1},
      {"rope_interleaved", true},
      {"partial_rotary_factor", 0.5},
      {"quantization_config", {{"quant_method", "gptq"}, {"bits", 4}}},
  };
  for (const auto& [key, value] : cases) {
    SCOPED_TRACE(key);
    nlohmann::json config = base;
    config[key] = value;
    const std::string hf = tmp / ("hf_" + key);
    write_hf_dir(hf, tensors, config);
    const std::string e =
        error_of([&] { import_hf_model(hf, tmp / ("m_" + key), uint64_t{1} << 30, false); });
    EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << e;
    EXPECT_NE(e.find(hf + "/config.json"), std::string::npos) << e;
  }
  // Keys refused only in one family: transformers' Mistral has no biases, its Qwen2 no head_dim.
  const std::vector<std::tuple<std::string, std::string, nlohmann::json>> family_cases = {
      {"mistral", "attention_bias", true}, {"qwen2", "head_dim", 32}};
  for (const auto& [type, key, value] : family_cases) {
    SCOPED_TRACE(type + " " + key);
    nlohmann::json config = base;
    config["model_type"] = type;
    config["architectures"] = {type == "mistral" ? "MistralForCausalLM" : "Qwen2ForCausalLM"};
    config[key] = value;
    const std::string hf = tmp / ("hf_" + type + "_" + key);
    write_hf_dir(hf, tensors, config);
    const std::string e =
        error_of([&] { import_hf_model(hf, hf + "_m", uint64_t{1} << 30, false); });
    EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << e;
  }
  // A family's extra tensor missing from the checkpoint is named (attention_bias adds 4 per layer).
  nlohmann::json biased = base;
  biased["attention_bias"] = true;
  write_hf_dir(tmp / "hf_biased", tensors, biased);
  const std::string e = error_of(
      [&] { import_hf_model(tmp / "hf_biased", tmp / "m_biased", uint64_t{1} << 30, false); });
  EXPECT_NE(e.find("has no tensor 'model.layers.0.self_attn.q_proj.bias'"), std::string::npos) << e;
  // The values zerotrain implements are accepted: explicit defaults, a null window, no dropout.
  nlohmann::json config = base;
  config["head_dim"] = 16;
  config["sliding_window"] = nullptr;
  config["attention_dropout"] = 0.0;
  config["rope_scaling"] = nullptr;
  config["model_type"] = "mistral";
  config["architectures"] = {"MistralForCausalLM"};
  write_hf_dir(tmp / "hf_ok", tensors, config);
  EXPECT_NO_THROW(import_hf_model(tmp / "hf_ok", tmp / "m_ok", uint64_t{1} << 30, false));
}

// Real configs carry keys no modelling code reads (SmolLM2's is_llama_config, an exporter's
// _model_name_or_path): known inert ones are listed, unknown ones accepted and reported, and
// refused by name under --strict-config, leaving no output.
TEST(HfImport, UnknownConfigKeysAreAcceptedAndReportedOrRefusedWhenStrict) {
  TempDir tmp;
  nlohmann::json config = preset_config("tiny").to_hf_json();
  config["unk_token_id"] = 0;
  config["dtype"] = "bfloat16";
  config["is_llama_config"] = true;
  config["rope_interleaved"] = false;
  config["transformers.js_config"] = {{"kv_cache_dtype", {{"q4f16", "float16"}}}};
  config["_model_name_or_path"] = "exporter";
  config["hidden_act"] = "swish";           // transformers' alias of silu
  config["max_position_embedings"] = 2048;  // misspelt: the hint names the key it may mean
  write_hf_dir(tmp / "hf", tiny_tensors(), config);
  const HfImportResult r = import_hf_model(tmp / "hf", tmp / "m", uint64_t{1} << 30, false);
  EXPECT_EQ(r.unknown_keys,
            (std::vector<std::string>{"_model_name_or_path", "max_position_embedings"}));
  EXPECT_EQ(r.unknown_key_hints, (std::vector<std::string>{"", "max_position_embeddings"}));
  for (const char* key :
       {"unk_token_id", "dtype", "is_llama_config", "rope_interleaved", "transformers.js_config"})
    EXPECT_NE(std::find(r.ignored_keys.begin(), r.ignored_keys.end(), key), r.ignored_keys.end())
        << key;
  const std::string e = error_of([&] {
    import_hf_model(tmp / "hf", tmp / "m_strict", uint64_t{1} << 30, false,
                    UnknownConfigKeys::kRefuse);
  });
  EXPECT_NE(e.find("unknown key '_model_name_or_path'"), std::string::npos) << e;
  EXPECT_NE(e.find(tmp / "hf/config.json"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(tmp / "m_strict"));
}

// A misspelt config.json key changes what init builds (rope_thetta leaves rope_theta at its
// default): it is warned of with the key it most likely means, as import does, and refused under
// --strict-config with the same hint.
TEST(IoCli, InitNamesAnUnknownConfigKeyAndTheKeyItMayMean) {
  TempDir tmp;
  auto config = preset_config("tiny").to_hf_json();
  config["rope_thetta"] = config.at("rope_theta");
  config.erase("rope_theta");
  testing::write_file(tmp / "config.json", config.dump());
  auto r = run_zerotrain("init --config-json " + q(tmp / "config.json") + " --seed 1 --out " +
                         q(tmp / "m"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: " + (tmp / "config.json") +
                          " key 'rope_thetta' is not one zerotrain reads or knows (did you mean "
                          "'rope_theta'?)"),
            std::string::npos)
      << r.output;
  r = run_zerotrain("init --config-json " + q(tmp / "config.json") + " --seed 1 --out " +
                    q(tmp / "m2") + " --strict-config");
  expect_failure_naming(r, {"unknown key 'rope_thetta' (did you mean 'rope_theta'?)"});
  EXPECT_TRUE(no_output_left(tmp / "m2"));
  r = run_zerotrain("init --preset tiny --seed 1 --out " + q(tmp / "m3") + " --strict-config");
  expect_failure_naming(r, {"--strict-config applies to --config-json"});
}

// A directory with both model.safetensors and an index (a stale one, say): transformers'
// from_pretrained reads the single file, and so does import, saying so in its record.
TEST(HfImport, SingleFileWinsOverAnIndexBesideIt) {
  TempDir tmp;
  const std::vector<StoredTensor> tensors = tiny_tensors();
  write_hf_dir(tmp / "hf", tensors);
  nlohmann::json index = {{"metadata", {{"total_size", 1}}},
                          {"weight_map", nlohmann::json::object()}};
  for (const StoredTensor& t : tensors) index["weight_map"][t.entry.name] = "missing.safetensors";
  write_json(tmp / "hf/model.safetensors.index.json", index);
  const HfImportResult r = import_hf_model(tmp / "hf", tmp / "m", uint64_t{1} << 30, false);
  EXPECT_TRUE(r.index_ignored);
  EXPECT_EQ(r.source_files, std::vector<std::string>{tmp / "hf/model.safetensors"});
  ModelDirReader back(tmp / "m");
  std::vector<float> values(
      static_cast<size_t>(tensors[0].entry.shape[0] * tensors[0].entry.shape[1]));
  back.read_tensor_f32(tensors[0].entry.name, values.data());
  EXPECT_EQ(values, tensors[0].expected);
}

// Every tokenizer file a Hugging Face directory may hold travels with the model, byte for byte:
// import dropped chat_template.jinja, added_tokens.json and tokenizer.model, so import → export
// lost the chat template.
TEST(HfImport, EveryTokenizerFileTravelsWithTheModel) {
  TempDir tmp;
  write_hf_dir(tmp / "hf", tiny_tensors());
  const std::map<std::string, std::string> files = {
      {"tokenizer.json", "{\"model\": {}}"},
      {"tokenizer_config.json", "{}"},
      {"special_tokens_map.json", "{}"},
      {"chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}"},
      {"added_tokens.json", "{\"<x>\": 300}"},
      {"tokenizer.model", std::string("\x0a\x00\xff binary", 10)}};
  for (const auto& [name, text] : files) testing::write_file(tmp / ("hf/" + name), text);
  const HfImportResult r = import_hf_model(tmp / "hf", tmp / "m", uint64_t{1} << 30, false);
  for (const auto& [name, text] : files) {
    EXPECT_EQ(testing::read_file(tmp / ("m/" + name)), text) << name;
    EXPECT_NE(std::find(r.tokenizer_files.begin(), r.tokenizer_files.end(), name),
              r.tokenizer_files.end())
        << name;
  }
  export_safetensors(tmp / "m", tmp / "back", uint64_t{1} << 30, false);
  for (const auto& [name, text] : files)
    EXPECT_EQ(testing::read_file(tmp / ("back/" + name)), text) << name;
}

}  // namespace
}  // namespace zt

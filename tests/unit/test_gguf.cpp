// GGUF files (io/gguf_file.h, io/gguf_quants.h, io/gguf_import.h) without Python:
//   - a file written by write_gguf_file reads back with its metadata, shapes, types and values;
//   - every truncation of a file, and random byte damage, is either read or refused naming the
//     file: never a crash, never a read past the end (counts and lengths are checked first);
//   - llama.cpp's q/k row permutation (reshape to [heads, 2, hd/2, in], swap axes 1 and 2) is what
//     gguf_permuted_row computes, and a bijection;
//   - Q8_0 quantization rounds each value to within half a step of its block's scale;
//   - the rope scaling keys read as llama.cpp reads them (yarn, linear without a type);
//   - rope_freqs.weight factors that are not llama3 scaling (one factor off by 1%, the wrong
//     count, a factor below 1) are refused naming the file and the tensor; factors of 1 are no
//     scaling, and a factor reads back as the decimal it was written from.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "../support/error_text.h"
#include "io/gguf_export.h"
#include "io/gguf_file.h"
#include "io/gguf_import.h"
#include "io/gguf_quants.h"
#include "model/rope_freq_factors.h"
#include "test_io_support.h"
#include "util/bf16.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// A small file: a few metadata kinds (a nested array among them) and an F32 and a Q8_0 tensor.
void write_small_file(const std::string& path, std::vector<float>* values) {
  std::mt19937 gen(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  values->resize(2 * 64);
  for (float& v : *values) v = dist(gen);
  const std::vector<std::pair<std::string, GgufValue>> metadata = {
      {"general.architecture", {GgufValueType::kString, GgufValueType::kUint32, "llama"}},
      {"llama.block_count", {GgufValueType::kUint32, GgufValueType::kUint32, 2}},
      {"llama.rope.freq_base", {GgufValueType::kFloat32, GgufValueType::kUint32, 10000.0}},
      {"tokenizer.ggml.tokens",
       {GgufValueType::kArray, GgufValueType::kString, nlohmann::json{"a", "b", "c"}}},
      {"flag", {GgufValueType::kBool, GgufValueType::kUint32, true}}};
  const std::vector<GgufTensorToWrite> tensors = {{"f32", {64, 2}, GgmlType::kF32},
                                                  {"q8", {64, 2}, GgmlType::kQ8_0}};
  write_gguf_file(path, metadata, tensors, [&](size_t i, std::vector<uint8_t>& bytes) {
    if (i == 0)
      std::memcpy(bytes.data(), values->data(), bytes.size());
    else
      quantize_q8_0(values->data(), 128, bytes.data());
  });
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// The name an exported file gets (general.name) without --gguf-name: a train run's final/ is named
// by its run however the path is spelt (a trailing slash, ".", ".."), an imported GGUF model by
// the file's own name, any other directory by its name.
TEST(Gguf, AnExportIsNamedByTheRunOrTheImportedFile) {
  TempDir tmp;
  fs::create_directories(tmp / "sweep-7/final");
  std::ofstream(tmp / "sweep-7/run.json") << "{}";
  for (const std::string& path : {tmp / "sweep-7/final", tmp / "sweep-7/final/",
                                  tmp / "sweep-7/final/.", tmp / "sweep-7/final/sub/.."})
    EXPECT_EQ(gguf_model_name(path), "sweep-7") << path;
  fs::create_directories(tmp / "imported");
  std::ofstream(tmp / "imported/import.json") << R"({"name": "Smollm2 135M"})";
  EXPECT_EQ(gguf_model_name(tmp / "imported"), "Smollm2 135M");
  fs::create_directories(tmp / "plain/final");  // no run.json beside it: its own name
  EXPECT_EQ(gguf_model_name(tmp / "plain/final/"), "final");
}

TEST(Gguf, WrittenFileReadsBack) {
  TempDir tmp;
  std::vector<float> values;
  const std::string path = tmp / "small.gguf";
  write_small_file(path, &values);
  const GgufReader r(path);
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.string("general.architecture"), "llama");
  EXPECT_EQ(r.integer("llama.block_count"), 2);
  EXPECT_EQ(r.number("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(r.value("tokenizer.ggml.tokens"), (nlohmann::json{"a", "b", "c"}));
  EXPECT_EQ(r.value("flag"), true);
  ASSERT_EQ(r.tensors().size(), 2u);
  const GgufTensorInfo& f = r.tensors()[0];
  EXPECT_EQ(f.hf_shape(), (std::vector<int64_t>{2, 64}));
  std::vector<float> got(128);
  r.read_rows(f, 0, 2, got.data());
  EXPECT_EQ(got, values);
  r.read_rows(r.tensors()[1], 1, 1, got.data());  // the second row alone
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(got[i], values[64 + i], 0.05) << i;
  const std::string e = error_of([&] { r.read_rows(f, 1, 2, got.data()); });
  EXPECT_NE(e.find("'f32'"), std::string::npos) << e;
}

// Every prefix of the file, and 300 files with random bytes overwritten, are read or refused
// naming the file. Under AddressSanitizer this also shows no read past a buffer.
TEST(Gguf, DamagedFilesAreRefusedNamingTheFile) {
  TempDir tmp;
  std::vector<float> values;
  const std::string good = tmp / "good.gguf";
  write_small_file(good, &values);
  const std::string bytes = read_all(good);
  const std::string path = tmp / "damaged.gguf";
  int refused = 0;
  auto attempt = [&](const std::string& content, const std::string& what) {
    write_all_bytes(path, content);
    try {
      const GgufReader r(path);
      std::vector<float> out;
      for (const GgufTensorInfo& t : r.tensors()) {
        out.resize(static_cast<size_t>(t.numel));
        r.read_rows(t, 0, t.rows(), out.data());
      }
    } catch (const Error& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << what << ": " << e.what();
    }
  };
  for (size_t n = 0; n < bytes.size(); ++n)
    attempt(bytes.substr(0, n), "prefix " + std::to_string(n));
  EXPECT_EQ(refused, static_cast<int>(bytes.size())) << "a truncated file was accepted";
  std::mt19937 gen(11);
  for (int k = 0; k < 300; ++k) {
    std::string damaged = bytes;
    for (int j = 0; j < 4; ++j) damaged[gen() % 200] = static_cast<char>(gen());
    attempt(damaged, "mutant " + std::to_string(k));
  }
}

TEST(Gguf, LlamaCppPermutationIsUndone) {
  // llama.cpp: w.reshape(heads, 2, hd/2, in).swapaxes(1, 2): stored row (h, j, i) at
  // h·hd + j·2 + i holds Hugging Face row (h, i, j) at h·hd + i·hd/2 + j.
  for (int64_t hd : {2, 8, 64, 128}) {
    const int64_t heads = 3;
    std::set<int64_t> seen;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < hd / 2; ++j) {
          const int64_t hf_row = h * hd + i * (hd / 2) + j;
          EXPECT_EQ(gguf_permuted_row(hf_row, hd), h * hd + j * 2 + i) << hd << " " << hf_row;
          seen.insert(gguf_permuted_row(hf_row, hd));
        }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), heads * hd);
  }
  EXPECT_TRUE(gguf_permutes_rows("llama", "model.layers.3.self_attn.k_proj.weight"));
  EXPECT_FALSE(gguf_permutes_rows("llama", "model.layers.3.self_attn.v_proj.weight"));
  EXPECT_FALSE(gguf_permutes_rows("qwen2", "model.layers.3.self_attn.q_proj.weight"));
  EXPECT_EQ(gguf_tensor_name("model.layers.12.mlp.down_proj.weight"), "blk.12.ffn_down.weight");
  EXPECT_EQ(gguf_tensor_name("model.embed_tokens.weight"), "token_embd.weight");
}

TEST(Gguf, Q8_0RoundsWithinHalfAStep) {
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> x(32 * 40);
  for (float& v : x) v = dist(gen);
  std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero block: d = 0, every q 0
  std::vector<uint8_t> q(40 * 34);
  quantize_q8_0(x.data(), static_cast<int64_t>(x.size()), q.data());
  std::vector<float> y(x.size());
  ggml_dequantize(GgmlType::kQ8_0, q.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t b = 0; b < 40; ++b) {
    uint16_t d16;
    std::memcpy(&d16, q.data() + b * 34, 2);
    const float d = fp16_to_float(d16);
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    EXPECT_NEAR(d, amax / 127, amax / 127 * 1e-3) << b;
    for (size_t j = 0; j < 32; ++j)
      EXPECT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), 0.5f * d + amax * 2e-3f) << b << " " << j;
  }
}

TEST(GgufRope, FactorsThatAreNotLlama3ScalingAreRefused) {
  ModelConfig c;
  c.hidden_size = 2048;
  c.num_heads = 32;
  c.rope_theta = 500000.0;
  c.rope_scaling = {RopeScaling::kLlama3, 32.0, 1.0, 4.0, 8192, {}, {}, 1.0};  // Llama 3.2's
  const std::vector<float> factors = llama3_rope_freq_factors(c);
  const std::string where = "m.gguf: tensor 'rope_freqs.weight'";
  ASSERT_EQ(llama3_scaling_from_freq_factors(factors, c.rope_theta, 64, where), c.rope_scaling);
  // The band between the ends must hold something to perturb.
  const auto medium =
      std::find_if(factors.begin(), factors.end(), [](float f) { return f > 1.0f && f < 32.0f; });
  ASSERT_NE(medium, factors.end());
  std::vector<float> off = factors;
  off[static_cast<size_t>(medium - factors.begin())] *= 1.01f;
  std::vector<float> below = factors;
  below[0] = 0.5f;
  const std::vector<float> short_list(factors.begin(), factors.end() - 1);
  for (const auto& [what, values] :
       {std::pair{"one factor off", off}, {"below 1", below}, {"too few", short_list}}) {
    const std::string error =
        error_of([&] { llama3_scaling_from_freq_factors(values, c.rope_theta, 64, where); });
    EXPECT_EQ(error.rfind(where, 0), 0u) << what << ": " << error;
  }
}

TEST(GgufRope, FactorsOfOneAreNoScalingAndParametersReadBackAsWritten) {
  ModelConfig c;
  c.hidden_size = 2048;
  c.num_heads = 32;
  c.rope_theta = 500000.0;
  c.rope_scaling = {
      RopeScaling::kLlama3, 2.2, 1.0, 4.0, 8192, {}, {}, 1.0};  // 2.2 is not an fp32 value
  const std::string where = "m.gguf: tensor 'rope_freqs.weight'";
  EXPECT_EQ(llama3_scaling_from_freq_factors(llama3_rope_freq_factors(c), c.rope_theta, 64, where),
            c.rope_scaling);
  EXPECT_EQ(
      llama3_scaling_from_freq_factors(std::vector<float>(32, 1.0f), c.rope_theta, 64, where).type,
      RopeScaling::kNone);
}

// A llama file's model metadata with `rope` added, and its embedding (no tensor data read).
ModelConfig config_of_llama_file(const std::string& path,
                                 std::vector<std::pair<std::string, GgufValue>> rope,
                                 const std::string& arch = "llama") {
  auto u32 = [](int64_t v) { return GgufValue{GgufValueType::kUint32, GgufValueType::kUint32, v}; };
  std::vector<std::pair<std::string, GgufValue>> metadata = {
      {"general.architecture", {GgufValueType::kString, GgufValueType::kUint32, arch}},
      {arch + ".context_length", u32(128)},
      {arch + ".embedding_length", u32(64)},
      {arch + ".block_count", u32(1)},
      {arch + ".feed_forward_length", u32(96)},
      {arch + ".attention.head_count", u32(4)},
      {arch + ".attention.head_count_kv", u32(2)},
      {arch + ".attention.layer_norm_rms_epsilon",
       {GgufValueType::kFloat32, GgufValueType::kUint32, 1e-5}}};
  metadata.insert(metadata.end(), rope.begin(), rope.end());
  write_gguf_file(
      path, metadata, {{"token_embd.weight", {64, 256}, GgmlType::kF32}},
      [](size_t, std::vector<uint8_t>& bytes) { std::fill(bytes.begin(), bytes.end(), 0); });
  return gguf_model_config(GgufReader(path));
}

GgufValue f32_value(double v) {
  return {GgufValueType::kFloat32, GgufValueType::kUint32, v};
}
GgufValue text_value(const char* v) {
  return {GgufValueType::kString, GgufValueType::kUint32, v};
}

// llama.cpp's reading of the rope scaling keys (llama-model.cpp, llama-context.cpp): yarn's factor
// and original length (the context length when absent), the factor on cos and sin as
// rope.scaling.attn_factor × (0.1·ln(factor) + 1); linear when a factor comes without a type;
// an attn_factor with another scaling, which zerotrain does not apply, refused.
TEST(GgufRope, ScalingKeysAreReadAsLlamaCppReadsThem) {
  TempDir tmp;
  const std::string path = tmp / "rope.gguf";
  ModelConfig c =
      config_of_llama_file(path, {{"llama.rope.scaling.type", text_value("yarn")},
                                  {"llama.rope.scaling.factor", f32_value(4.0)},
                                  {"llama.rope.scaling.original_context_length",
                                   {GgufValueType::kUint32, GgufValueType::kUint32, 32}}});
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kYarn);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 32);
  EXPECT_EQ(c.rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1.0);
  EXPECT_EQ(c.max_positions(), 128);
  c = config_of_llama_file(path, {{"llama.rope.scaling.type", text_value("yarn")},
                                  {"llama.rope.scaling.factor", f32_value(2.0)},
                                  {"llama.rope.scaling.attn_factor", f32_value(0.5)}});
  EXPECT_EQ(c.rope_scaling.original_max_positions, 128);
  EXPECT_EQ(c.rope_scaling.attention_factor, 0.5 * (0.1 * std::log(2.0) + 1.0));
  EXPECT_EQ(c.max_positions(), 256);
  // No type: llama.cpp's default, linear, where a factor scales.
  c = config_of_llama_file(path, {{"llama.rope.scaling.factor", f32_value(4.0)}});
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kLinear);
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  c = config_of_llama_file(path, {{"llama.rope.scale_linear", f32_value(2.0)}});
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kLinear);
  c = config_of_llama_file(path, {{"llama.rope.scaling.factor", f32_value(1.0)}});
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kNone);
  // A factor of 1 (or none) scales nothing in llama.cpp whatever the type.
  c = config_of_llama_file(path, {{"llama.rope.scaling.type", text_value("linear")},
                                  {"llama.rope.scaling.factor", f32_value(1.0)}});
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kNone);
  c = config_of_llama_file(path, {{"llama.rope.scaling.type", text_value("yarn")}});
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::kNone);
  EXPECT_NE(error_of([&] {
              config_of_llama_file(path, {{"llama.rope.scaling.attn_factor", f32_value(0.5)}});
            }).find("rope.gguf: metadata 'llama.rope.scaling.attn_factor' 0.5"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              config_of_llama_file(path,
                                   {{"llama.rope.scaling.type", text_value("yarn")},
                                    {"llama.rope.scaling.factor", f32_value(4.0)},
                                    {"llama.rope.scaling.yarn_log_multiplier", f32_value(0.1)}});
            }).find("'llama.rope.scaling.yarn_log_multiplier'"),
            std::string::npos);
}

// llama.cpp's mistral3 (Ministral 3): yarn's band ends from its keys, the magnitude
// get_mscale(f, 1) / get_mscale(f, yarn_log_multiplier), and the query scale β
// (attention.temperature_scale) over the yarn original length; without the scale, β 0.
TEST(GgufRope, Mistral3ReadsItsYarnAndQueryScale) {
  TempDir tmp;
  const std::string path = tmp / "mistral3.gguf";
  const std::vector<std::pair<std::string, GgufValue>> yarn = {
      {"mistral3.rope.scaling.type", text_value("yarn")},
      {"mistral3.rope.scaling.factor", f32_value(16.0)},
      {"mistral3.rope.scaling.original_context_length",
       {GgufValueType::kUint32, GgufValueType::kUint32, 32}},
      {"mistral3.rope.scaling.yarn_beta_fast", f32_value(16.0)},
      {"mistral3.rope.scaling.yarn_log_multiplier", f32_value(0.5)}};
  auto scaled = yarn;
  scaled.push_back({"mistral3.attention.temperature_scale", f32_value(0.1)});
  ModelConfig c = config_of_llama_file(path, scaled, "mistral3");
  EXPECT_EQ(c.model_type(), "ministral3");
  EXPECT_EQ(c.rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_EQ(c.rope_scaling.attention_factor,
            (0.1 * std::log(16.0) + 1.0) / (0.05 * std::log(16.0) + 1.0));
  EXPECT_EQ(c.llama4_scaling_beta, 0.1);
  EXPECT_EQ(c.llama4_scaling_positions, 32);
  EXPECT_EQ(c.max_positions(), 32);
  c = config_of_llama_file(path, yarn, "mistral3");
  EXPECT_EQ(c.model_type(), "ministral3");
  EXPECT_EQ(c.llama4_scaling_beta, 0.0);
  EXPECT_EQ(c.max_positions(), 16 * 32);
  auto extended = yarn;
  extended.push_back({"mistral3.rope.scaling.yarn_ext_factor", f32_value(1.0)});
  EXPECT_NE(error_of([&] {
              config_of_llama_file(path, extended, "mistral3");
            }).find("metadata 'mistral3.rope.scaling.yarn_ext_factor' in a mistral3 file"),
            std::string::npos);
}

}  // namespace
}  // namespace zt

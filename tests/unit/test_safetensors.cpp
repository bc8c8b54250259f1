// safetensors export (io/safetensors.h): header layout (length prefix, 8-byte alignment,
// contiguous offsets, metadata), bitwise round trip against the HDF5 model directory, sharding
// with an index under a tiny limit, and refusals of bad input (missing or non-model directories,
// damaged safetensors files, a non-empty output).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "../support/error_text.h"
#include "io/fs_util.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "io/safetensors_export.h"
#include "io/weight_file.h"
#include "test_io_support.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

uint64_t read_le64(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  return n;
}

// A tiny model with random values: norms stored as fp32, everything else as bf16.
void write_random_model(const std::string& dir) {
  const ModelConfig config = preset_config("tiny");
  ModelDirWriter writer(dir, config);
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const ParamLayout layout(config);
  for (const TensorInfo& t : layout.tensors()) {
    std::vector<float> values(static_cast<size_t>(t.numel));
    for (float& v : values) v = dist(gen);
    if (t.shape.size() == 1) {
      writer.add_tensor(t.name, t.shape, values.data());
    } else {
      std::vector<bf16_t> packed(values.size());
      floats_to_bf16(values.data(), packed.data(), values.size());
      writer.add_tensor(t.name, t.shape, packed.data());
    }
  }
  writer.finish();
}

// The stored bytes of a tensor of a model directory (bf16 or fp32 as stored).
std::vector<uint8_t> model_tensor_bytes(ModelDirReader& model, const TensorInfo& t) {
  if (model.stored_dtype(t.name) == DType::kBf16) {
    std::vector<uint8_t> bytes(static_cast<size_t>(t.numel) * 2);
    model.read_tensor_bf16(t.name, reinterpret_cast<bf16_t*>(bytes.data()));
    return bytes;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(t.numel) * 4);
  model.read_tensor_f32(t.name, reinterpret_cast<float*>(bytes.data()));
  return bytes;
}

TEST(Safetensors, HeaderLayout) {
  std::vector<SafetensorsEntry> tensors = {
      {"a.weight", "BF16", {3, 5}, 0, 0}, {"b", "F32", {7}, 0, 0}, {"c", "BF16", {1}, 0, 0}};
  const std::string header = safetensors_header(tensors);
  ASSERT_GE(header.size(), 8u);
  EXPECT_EQ(header.size() % 8, 0u) << "8 + N must be a multiple of 8";
  EXPECT_EQ(read_le64(header), header.size() - 8);
  const std::string json = header.substr(8);
  const size_t last = json.find_last_not_of(' ');
  EXPECT_EQ(json[last], '}');
  EXPECT_LT(json.size() - last - 1, 8u) << "padding is at most 7 spaces";
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j["a.weight"]["dtype"], "BF16");
  EXPECT_EQ(j["a.weight"]["shape"], nlohmann::json({3, 5}));
  EXPECT_EQ(j["a.weight"]["data_offsets"], nlohmann::json({0, 30}));
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({30, 58}));
  EXPECT_EQ(j["c"]["data_offsets"], nlohmann::json({58, 60}));
  // Header order is the data order: "a.weight" is serialised before "b" before "c".
  EXPECT_LT(json.find("\"a.weight\""), json.find("\"b\""));
  EXPECT_LT(json.find("\"b\""), json.find("\"c\""));
  EXPECT_EQ(tensors[2].end, 60u);
}

TEST(Safetensors, WriterReaderRoundTrip) {
  TempDir tmp;
  const std::string path = tmp / "x.safetensors";
  std::vector<SafetensorsEntry> tensors = {{"w", "BF16", {2, 3}, 0, 0}, {"n", "F32", {3}, 0, 0}};
  const bf16_t w[6] = {1, 2, 3, 0x3f80, 0xbf80, 0x7f7f};
  const float n[3] = {1.5f, -2.25f, 3e-20f};
  {
    SafetensorsFileWriter writer(path, tensors);
    writer.append(w, sizeof w);
    EXPECT_THROW(writer.finish(), Error) << "finish with bytes missing";
    writer.append(n, sizeof n);
    EXPECT_THROW(writer.append(n, 1), Error) << "more bytes than announced";
    writer.finish();
  }
  const SafetensorsReader reader(path);
  EXPECT_EQ(reader.header_bytes() % 8, 0u);
  EXPECT_EQ(reader.metadata()["format"], "pt");
  ASSERT_EQ(reader.tensors().size(), 2u);
  EXPECT_EQ(reader.tensors()[0].name, "w");
  EXPECT_EQ(reader.tensors()[1].shape, std::vector<int64_t>{3});
  const auto wb = reader.read_bytes("w");
  const auto nb = reader.read_bytes("n");
  ASSERT_EQ(wb.size(), sizeof w);
  ASSERT_EQ(nb.size(), sizeof n);
  EXPECT_EQ(std::memcmp(wb.data(), w, sizeof w), 0);
  EXPECT_EQ(std::memcmp(nb.data(), n, sizeof n), 0);
  EXPECT_THROW(reader.read_bytes("missing"), Error);
}

TEST(Safetensors, ExportIsBitwiseTheModelDirectory) {
  TempDir tmp;
  write_random_model(tmp / "model");
  const SafetensorsExport result = export_safetensors(tmp / "model", tmp / "hf", 1ull << 30, false);
  ASSERT_EQ(result.files, std::vector<std::string>{kSafetensorsFile});
  EXPECT_FALSE(fs::exists(tmp / "hf/model.safetensors.index.json")) << "one file needs no index";
  EXPECT_EQ(testing::read_file(tmp / "hf/config.json"),
            testing::read_file(tmp / "model/config.json"));
  ModelDirReader model(tmp / "model");
  const SafetensorsReader st(tmp / "hf/model.safetensors");
  ASSERT_EQ(st.tensors().size(), model.layout().tensors().size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < st.tensors().size(); ++i) {
    const TensorInfo& t = model.layout().tensors()[i];
    const SafetensorsEntry& e = st.tensors()[i];
    EXPECT_EQ(e.name, t.name) << "tensors in layout order";
    EXPECT_EQ(e.shape, t.shape);
    EXPECT_EQ(e.dtype, t.shape.size() == 1 ? "F32" : "BF16") << t.name;
    EXPECT_EQ(e.begin, expected_offset) << "offsets contiguous";
    expected_offset = e.end;
    EXPECT_EQ(st.read_bytes(t.name), model_tensor_bytes(model, t)) << t.name;
  }
  EXPECT_EQ(expected_offset, result.bytes);
  EXPECT_EQ(fs::file_size(tmp / "hf/model.safetensors"), st.header_bytes() + result.bytes);
}

TEST(Safetensors, ShardsWithIndexPastTheLimit) {
  TempDir tmp;
  write_random_model(tmp / "model");
  const uint64_t limit = 40000;  // bytes: the tiny model (~200 KB) needs several shards
  const SafetensorsExport result = export_safetensors(tmp / "model", tmp / "hf", limit, false);
  ASSERT_GT(result.files.size(), 2u);
  const size_t k = result.files.size();
  for (size_t i = 0; i < k; ++i)
    EXPECT_EQ(result.files[i],
              model_shard_file_name(static_cast<int>(i) + 1, static_cast<int>(k), "safetensors"));
  EXPECT_FALSE(fs::exists(tmp / "hf/model.safetensors"));
  const nlohmann::json index = read_json_file(tmp / "hf/model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), result.bytes);
  ModelDirReader model(tmp / "model");
  const auto weight_map = open_hf_weights(tmp / "hf").weight_map;
  ASSERT_EQ(weight_map.size(), model.layout().tensors().size());
  uint64_t total = 0;
  size_t previous_shard = 0;
  for (const TensorInfo& t : model.layout().tensors()) {
    const std::string& file = index["weight_map"][t.name].get<std::string>();
    EXPECT_EQ(weight_map.at(t.name), file);
    const size_t shard = static_cast<size_t>(
        std::find(result.files.begin(), result.files.end(), file) - result.files.begin());
    EXPECT_GE(shard, previous_shard) << "shards hold consecutive tensors";
    previous_shard = shard;
    const SafetensorsReader st(tmp / ("hf/" + file));
    EXPECT_EQ(st.read_bytes(t.name), model_tensor_bytes(model, t)) << t.name;
    total += st.tensor(t.name).end - st.tensor(t.name).begin;
  }
  EXPECT_EQ(total, result.bytes);
  for (const std::string& f : result.files) {
    const SafetensorsReader st(tmp / ("hf/" + f));
    const uint64_t data = fs::file_size(tmp / ("hf/" + f)) - st.header_bytes();
    EXPECT_TRUE(data <= limit || st.tensors().size() == 1) << f << " holds " << data << " bytes";
  }
}

TEST(Safetensors, BadInputIsRefused) {
  TempDir tmp;
  auto message_of = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message_of([&] {
              export_safetensors(tmp / "nope", tmp / "hf", 1 << 20, false);
            }).find(tmp / "nope"),
            std::string::npos);
  fs::create_directories(tmp / "empty");
  EXPECT_NE(message_of([&] {
              export_safetensors(tmp / "empty", tmp / "hf", 1 << 20, false);
            }).find("config.json"),
            std::string::npos);
  EXPECT_TRUE(testing::no_output_left(tmp / "hf"));
  write_random_model(tmp / "model");
  fs::create_directories(tmp / "full");
  testing::write_file(tmp / "full/keep", "x");
  EXPECT_NE(message_of([&] {
              export_safetensors(tmp / "model", tmp / "full", 1 << 20, false);
            }).find("--overwrite"),
            std::string::npos);
  EXPECT_EQ(testing::read_file(tmp / "full/keep"), "x");

  // Damaged files: every refusal names the file.
  export_safetensors(tmp / "model", tmp / "hf", 1 << 30, false);
  const std::string good = testing::read_file(tmp / "hf/model.safetensors");
  const std::string bad = tmp / "bad.safetensors";
  auto refused = [&](const std::string& bytes) {
    testing::write_file(bad, bytes);
    return message_of([&] { SafetensorsReader r(bad); });
  };
  EXPECT_NE(refused(good.substr(0, good.size() - 2)).find(bad), std::string::npos) << "truncated";
  EXPECT_NE(refused(good.substr(0, 5)).find(bad), std::string::npos) << "no length prefix";
  std::string huge_length = good;
  huge_length[6] = 1;
  EXPECT_NE(refused(huge_length).find("header length"), std::string::npos);
  std::string not_json = good;
  not_json[8] = '[';
  EXPECT_NE(refused(not_json).find(bad), std::string::npos);
  std::string gap = good;  // shift one tensor's data_offsets: no longer contiguous
  const size_t at = gap.find("\"data_offsets\":[0,");
  ASSERT_NE(at, std::string::npos);
  gap[at + 16] = '2';
  EXPECT_NE(refused(gap).find(bad), std::string::npos);
  // Header fields of the wrong type are named, not reported as JSON-library type errors.
  auto header_file = [](const std::string& header) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i)
      bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return bytes + header + std::string(4, '\0');
  };
  for (const auto& [header, named] : std::vector<std::pair<std::string, std::string>>{
           {R"({"t": {"dtype": 5, "shape": [2], "data_offsets": [0, 4]}})",
            "'dtype' must be a string"},
           {R"({"t": {"dtype": "F16", "shape": "x", "data_offsets": [0, 4]}})",
            "'shape' must be an array"},
           {R"({"t": {"dtype": "F16", "shape": [2.5], "data_offsets": [0, 4]}})",
            "'shape' holds 2.5"},
           {R"({"t": {"dtype": "F16", "shape": [2], "data_offsets": [0, "a"]}})",
            "'data_offsets' holds"},
           {R"({"t": {"dtype": "F16", "shape": [2]}})", "has no 'data_offsets'"},
           {R"({"t": [1, 2]})", "tensor 't' is not an object"},
           {R"({"t": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}, "t": {}})",
            "appears twice"}}) {
    const std::string e = refused(header_file(header));
    EXPECT_NE(e.find(named), std::string::npos) << header << " -> " << e;
    EXPECT_EQ(e.find("json.exception"), std::string::npos) << e;
  }
}

// F64 tensors (what PEFT saves for an adapter trained in float64) read as fp32 rounded once to
// nearest; a finite value past fp32's range is refused naming the file, tensor and element.
TEST(Safetensors, F64TensorsReadRoundedToNearestFp32) {
  TempDir tmp;
  const std::vector<double> values = {1.0 / 3.0, -0.1, 1e-50, 2.5, 1e39};
  const std::string path = tmp / "f64.safetensors";
  SafetensorsFileWriter writer(path, {{"a", "F64", {4}, 0, 0}, {"huge", "F64", {1}, 0, 0}});
  writer.append(values.data(), 4 * sizeof(double));
  writer.append(values.data() + 4, sizeof(double));
  writer.finish();
  const SafetensorsReader reader(path);
  std::vector<float> got(4);
  reader.read_range_f32("a", 0, 4, got.data());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], static_cast<float>(values[i])) << i;  // the C++ conversion: to nearest
  EXPECT_EQ(got[0], 0.3333333432674407958984375f);          // 1/3 rounded up (its nearest)
  EXPECT_EQ(got[2], 0.0f);
  float one = 0;
  reader.read_range_f32("a", 3, 1, &one);
  EXPECT_EQ(one, 2.5f);
  const std::string m = error_of([&] { reader.read_range_f32("huge", 0, 1, &one); });
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("tensor 'huge': element 0"), std::string::npos) << m;
  EXPECT_NE(m.find("past fp32's range"), std::string::npos) << m;
}

TEST(Safetensors, ExportCommandThroughTheBinary) {
  TempDir tmp;
  write_random_model(tmp / "model");
  auto r = testing::run_zerotrain("export " + (tmp / "model") + " --format safetensors --out " +
                                  (tmp / "hf") + " --max-shard-size-mb 0.05");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(tmp / "hf/model.safetensors.index.json")) << r.output;
  r = testing::run_zerotrain("info " + (tmp / "hf") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json info = nlohmann::json::parse(r.output);
  EXPECT_EQ(info["kind"], "safetensors");
  EXPECT_EQ(info["parameters"].get<int64_t>(), ParamLayout(preset_config("tiny")).total_numel());
  EXPECT_GT(info["files"].size(), 2u);
  r = testing::run_zerotrain("export " + (tmp / "model") + " --format onnx --out " + (tmp / "x"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("'onnx'"), std::string::npos) << r.output;
  // A GGUF file carries the tokenizer: a model directory without one is refused, naming it.
  r = testing::run_zerotrain("export " + (tmp / "model") + " --format gguf --out " +
                             (tmp / "x.gguf"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("tokenizer.json"), std::string::npos) << r.output;
  EXPECT_TRUE(testing::no_output_left(tmp / "x.gguf"));
  r = testing::run_zerotrain("export " + (tmp / "missing") + " --out " + (tmp / "y"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(tmp / "missing"), std::string::npos) << r.output;
  EXPECT_TRUE(testing::no_output_left(tmp / "y"));
}

}  // namespace
}  // namespace zt

// Model directory: bitwise round trips (bf16/fp32, multi-shard, range reads, streaming), atomic
// output, deterministic init and h5dump readability.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <random>

#include "io/model_dir.h"
#include "model/init.h"
#include "test_io_support.h"
#include "util/error.h"

namespace zt {
namespace {

using testing::TempDir;

// Random fp32 values per tensor; norms are stored as fp32, matrices as bf16.
struct ModelData {
  std::map<std::string, std::vector<float>> f32;
  std::map<std::string, std::vector<bf16_t>> bf16;
};

ModelData random_model_data(const ParamLayout& layout, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  ModelData d;
  for (const auto& t : layout.tensors()) {
    std::vector<float> v(static_cast<size_t>(t.numel));
    for (auto& x : v) x = dist(gen);
    if (t.shape.size() == 1) {
      d.f32[t.name] = v;
    } else {
      std::vector<bf16_t> b(v.size());
      floats_to_bf16(v.data(), b.data(), v.size());
      d.bf16[t.name] = b;
    }
  }
  return d;
}

void write_model(const std::string& dir, const ModelConfig& c, const ModelData& d,
                 uint64_t shard_limit) {
  ModelDirWriter w(dir, c, shard_limit);
  const ParamLayout layout(c);
  for (const auto& t : layout.tensors()) {
    if (t.shape.size() == 1) {
      w.add_tensor(t.name, t.shape, d.f32.at(t.name).data());
    } else {
      w.add_tensor(t.name, t.shape, d.bf16.at(t.name).data());
    }
  }
  w.finish();
}

size_t count_files_with_suffix(const std::string& dir, const std::string& suffix) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix) ++n;
  }
  return n;
}

TEST(IoModelDir, RoundTripIsBitwiseAcrossManyShards) {
  TempDir tmp;
  const ModelConfig c = preset_config("tiny");
  const ParamLayout layout(c);
  const ModelData data = random_model_data(layout, 7);
  write_model(tmp / "m", c, data, /*shard_limit=*/20000);
  const size_t shards = count_files_with_suffix(tmp / "m", ".h5");
  EXPECT_GT(shards, 3u);
  char first[64];
  std::snprintf(first, sizeof first, "model-00001-of-%05zu.h5", shards);
  EXPECT_TRUE(std::filesystem::exists(tmp / ("m/" + std::string(first))));

  ModelDirReader r(tmp / "m");
  EXPECT_EQ(r.config(), c);
  EXPECT_EQ(r.shard_files().size(), shards);
  for (const auto& [name, want] : data.bf16) {
    std::vector<bf16_t> got(want.size());
    r.read_tensor_bf16(name, got.data());
    EXPECT_EQ(got, want) << name;
    std::vector<float> as_float(want.size());
    r.read_tensor_f32(name, as_float.data());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(as_float[i], bf16_to_float(want[i])) << name << " element " << i;
    EXPECT_EQ(r.stored_dtype(name), DType::kBf16);
  }
  for (const auto& [name, want] : data.f32) {
    std::vector<float> got(want.size());
    r.read_tensor_f32(name, got.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << name;
    EXPECT_EQ(r.stored_dtype(name), DType::kFloat32);
  }
}

TEST(IoModelDir, RangeReadsMatchTheFullTensor) {
  TempDir tmp;
  const ModelConfig c = preset_config("tiny");
  const ModelData data = random_model_data(ParamLayout(c), 11);
  write_model(tmp / "m", c, data, kDefaultShardLimitBytes);
  ModelDirReader r(tmp / "m");
  const std::string name = "model.layers.1.mlp.down_proj.weight";  // [64, 192]
  const auto& full = data.bf16.at(name);
  // Inside one row, across row ends, whole rows plus partial ends, the whole tensor, empty.
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {5, 10}, {180, 30}, {100, 192 * 3 + 17}, {0, 64 * 192}, {192, 192}, {77, 0}};
  for (const auto& [begin, count] : ranges) {
    std::vector<float> f(static_cast<size_t>(count));
    std::vector<bf16_t> b(static_cast<size_t>(count));
    r.read_tensor_range_f32(name, begin, count, f.data());
    r.read_tensor_range_bf16(name, begin, count, b.data());
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(b[static_cast<size_t>(i)], full[static_cast<size_t>(begin + i)]) << begin;
      ASSERT_EQ(f[static_cast<size_t>(i)], bf16_to_float(full[static_cast<size_t>(begin + i)]));
    }
  }
  std::vector<float> out(8);
  EXPECT_THROW(r.read_tensor_range_f32(name, 64 * 192 - 4, 8, out.data()), Error);
  // fp32 storage read as bf16 rounds to nearest.
  const auto& norm = data.f32.at("model.norm.weight");
  std::vector<bf16_t> nb(4);
  r.read_tensor_range_bf16("model.norm.weight", 3, 4, nb.data());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(nb[i], float_to_bf16(norm[3 + i]));
}

TEST(IoModelDir, StreamingRowsEqualsWholeTensorWrite) {
  TempDir tmp;
  const ModelConfig c = preset_config("tiny");
  const ParamLayout layout(c);
  const ModelData data = random_model_data(layout, 3);
  {
    ModelDirWriter w(tmp / "m", c);
    for (const auto& t : layout.tensors()) {
      const bool is_norm = t.shape.size() == 1;
      w.begin_tensor(t.name, t.shape, is_norm ? DType::kFloat32 : DType::kBf16);
      const int64_t cols = is_norm ? 1 : t.shape[1];
      for (int64_t row = 0; row < t.shape[0]; row += 5) {
        const int64_t rows = std::min<int64_t>(5, t.shape[0] - row);
        if (is_norm) {
          w.write_rows(data.f32.at(t.name).data() + row * cols, rows);
        } else {
          EXPECT_THROW(w.write_rows(data.f32.begin()->second.data(), 1), Error);  // wrong type
          w.write_rows(data.bf16.at(t.name).data() + row * cols, rows);
        }
      }
      w.end_tensor();
    }
    w.finish();
  }
  ModelDirReader r(tmp / "m");
  for (const auto& [name, want] : data.bf16) {
    std::vector<bf16_t> got(want.size());
    r.read_tensor_bf16(name, got.data());
    EXPECT_EQ(got, want) << name;
  }
}

TEST(IoModelDir, UnfinishedWriterLeavesNothing) {
  TempDir tmp;
  const ModelConfig c = preset_config("tiny");
  const std::vector<float> v(64, 1.0f);
  {
    ModelDirWriter w(tmp / "m", c);
    w.add_tensor("model.norm.weight", {64}, v.data());
    w.begin_tensor("lm_head.weight", {256, 64}, DType::kBf16);
    EXPECT_THROW(w.end_tensor(), Error);  // rows missing
  }
  EXPECT_TRUE(testing::no_output_left(tmp / "m"));
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path()));
}

TEST(IoModelDir, OverwriteReplacesOnlyWhenAsked) {
  TempDir tmp;
  const ModelConfig c = preset_config("tiny");
  std::filesystem::create_directories(tmp / "m");
  testing::write_file(tmp / "m/keep.txt", "old");
  EXPECT_THROW(write_model_dir_from_init(tmp / "m", c, 1, kDefaultShardLimitBytes, false), Error);
  EXPECT_TRUE(std::filesystem::exists(tmp / "m/keep.txt"));
  write_model_dir_from_init(tmp / "m", c, 1, kDefaultShardLimitBytes, /*overwrite=*/true);
  EXPECT_FALSE(std::filesystem::exists(tmp / "m/keep.txt"));
  EXPECT_NO_THROW(ModelDirReader(tmp / "m"));
  const auto entries = std::distance(std::filesystem::directory_iterator(tmp.path()),
                                     std::filesystem::directory_iterator());
  EXPECT_EQ(entries, 1);  // no .old-* or .tmp-* siblings
}

// Reads every tensor of a model directory as bf16, by name.
std::map<std::string, std::vector<bf16_t>> read_all_bf16(const std::string& dir) {
  ModelDirReader r(dir);
  std::map<std::string, std::vector<bf16_t>> out;
  for (const auto& t : r.layout().tensors()) {
    auto& v = out[t.name];
    v.resize(static_cast<size_t>(t.numel));
    r.read_tensor_bf16(t.name, v.data());
  }
  return out;
}

TEST(IoModelDir, InitIsDeterministicAndMatchesInitTensorRange) {
  TempDir tmp;
  const ModelConfig c = preset_config("small");
  write_model_dir_from_init(tmp / "a", c, 42, /*shard_limit=*/1 << 20);
  write_model_dir_from_init(tmp / "b", c, 42, kDefaultShardLimitBytes);
  write_model_dir_from_init(tmp / "c", c, 43, kDefaultShardLimitBytes);
  const auto a = read_all_bf16(tmp / "a"), b = read_all_bf16(tmp / "b"),
             d = read_all_bf16(tmp / "c");
  EXPECT_EQ(a, b);
  EXPECT_NE(a.at("model.embed_tokens.weight"), d.at("model.embed_tokens.weight"));
  EXPECT_EQ(a.at("model.norm.weight"), d.at("model.norm.weight"));  // norms are all ones
  const ParamLayout layout(c);
  const TensorInfo& t = layout.tensor(TensorRole::kOProj, 2);
  std::vector<float> expect(static_cast<size_t>(t.numel));
  init_tensor_range(c, t, 42, 0, t.numel, expect.data());
  for (size_t i = 0; i < expect.size(); ++i)
    ASSERT_EQ(a.at(t.name)[i], float_to_bf16(expect[i])) << i;
}

TEST(IoModelDir, H5dumpPrintsRealValues) {
  if (std::system("command -v h5dump > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "h5dump (Debian hdf5-tools) is not installed";
  TempDir tmp;
  write_model_dir_from_init(tmp / "m", preset_config("tiny"), 5);
  const std::string out = tmp / "dump.txt";
  const std::string cmd = "h5dump -d /model.norm.weight '" + (tmp / "m/model-00001-of-00001.h5") +
                          "' > '" + out + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << testing::read_file(out);
  const std::string dump = testing::read_file(out);
  EXPECT_NE(dump.find("16-bit little-endian floating-point"), std::string::npos) << dump;
  EXPECT_NE(dump.find("(0): 1, 1, 1, 1"), std::string::npos) << dump;
}

TEST(IoHdf5, Bf16TypeConvertsExactlyToFloat) {
  // Let HDF5 itself convert bf16 -> float32 and compare with our bit-level conversion.
  TempDir tmp;
  const std::vector<bf16_t> values = {0x3f80, 0xbf80, 0x0000, 0x8000, 0x0001,
                                      0x7f7f, 0x3c23, 0xc2f7, 0x0080, 0x4049};
  {
    h5::Id f = h5::create_file(tmp / "x.h5");
    h5::Id ds =
        h5::create_dataset(f, "x", DType::kBf16, {static_cast<int64_t>(values.size())}, "test");
    h5::write_box(ds, DType::kBf16, {0}, {static_cast<int64_t>(values.size())}, values.data(),
                  "test");
  }
  h5::Id f = h5::open_file(tmp / "x.h5");
  h5::Id ds = h5::open_dataset(f, "x", "test");
  EXPECT_EQ(h5::dataset_dtype(ds, "test"), DType::kBf16);
  std::vector<float> got(values.size());
  h5::check(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()), "read",
            "test");
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], bf16_to_float(values[i])) << i;
}

}  // namespace
}  // namespace zt

// A training checkpoint's rank file (checkpoint/checkpoint_files.h) without MPI: what each group's
// datasets are stored as, and what the range reader gives back. A frozen group's values are
// stored in the 16-bit type that holds them exactly, a trained group's state in float32; older
// files with float32 frozen values still load, and a 16-bit master beside moments is refused. A
// frozen group kept as a digest is not stored; the digest adds up over ranks' ranges.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "io/hdf5_util.h"
#include "util/bf16.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

class CheckpointRankFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("zt_rank_file_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A one-rank checkpoint of `slices` (group g = slices[g]) and its manifest.
  CheckpointManifest write(const std::vector<OptimizerSlice>& slices) {
    CheckpointManifest m;
    m.world_size = 1;
    for (const OptimizerSlice& s : slices)
      m.groups.push_back({s.range.count, s.range.count, {s.range}, ""});
    m.files.push_back(
        write_checkpoint_rank_file(dir_, 0, static_cast<int>(slices.size()),
                                   [&](int g) { return slices[static_cast<size_t>(g)]; }, {}));
    return m;
  }
  DType stored(int group, const char* tensor) {
    h5::Id f = h5::open_file(dir_ + "/" + checkpoint_rank_file_name(0));
    const std::string name = "/" + checkpoint_group_name(group) + "/" + tensor;
    h5::Id ds = h5::open_dataset(f, name, name);
    return h5::dataset_dtype(ds, name);
  }
  std::vector<float> read(const CheckpointManifest& m, int group, OptimizerTensor kind) {
    CheckpointRangeReader reader(dir_, m);
    const int64_t n = m.groups[static_cast<size_t>(group)].numel;
    std::vector<float> out(static_cast<size_t>(n), -7.0f);
    reader.read(group, kind, {0, n}, out.data());
    return out;
  }

  std::string dir_;
};

// Values exact in `dtype` (16-bit), spread over its range, with signed zeros, subnormals and the
// extremes.
std::vector<float> exact_values(DType dtype, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t bits = static_cast<uint16_t>((i * 40503u) & 0x7bffu) |
                          static_cast<uint16_t>((i & 1) << 15);  // finite in both types
    v[static_cast<size_t>(i)] = dtype == DType::kBf16 ? bf16_to_float(bits) : fp16_to_float(bits);
  }
  return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(CheckpointRankFile, FrozenValuesAreStoredInTheirWorkingTypeAndReadBackBitwise) {
  const int64_t n = (int64_t{1} << 20) + 3001;  // past the writer's first 2^20-element chunk
  const std::vector<float> bf16 = exact_values(DType::kBf16, n);
  const std::vector<float> fp16 = exact_values(DType::kFloat16, n);
  std::vector<float> master(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {  // a trained group: values no 16-bit type holds
    master[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i) * 1e-7f;
    m[static_cast<size_t>(i)] = -1e-9f * static_cast<float>(i);
    v[static_cast<size_t>(i)] = 3e-12f * static_cast<float>(i);
  }
  const CheckpointManifest manifest = write({
      {0, {0, n}, bf16.data(), nullptr, nullptr, DType::kBf16},
      {1, {0, n}, fp16.data(), nullptr, nullptr, DType::kFloat16},
      {2, {0, n}, master.data(), m.data(), v.data(), DType::kFloat32},
      {3, {0, n}, bf16.data(), nullptr, nullptr, DType::kFloat32},  // as before 2026-11-30
  });
  EXPECT_EQ(stored(0, "master"), DType::kBf16);
  EXPECT_EQ(stored(1, "master"), DType::kFloat16);
  EXPECT_EQ(stored(2, "master"), DType::kFloat32);
  EXPECT_EQ(stored(2, "v"), DType::kFloat32);
  EXPECT_EQ(stored(3, "master"), DType::kFloat32);
  EXPECT_TRUE(bitwise_equal(read(manifest, 0, OptimizerTensor::kMaster), bf16));
  EXPECT_TRUE(bitwise_equal(read(manifest, 1, OptimizerTensor::kMaster), fp16));
  EXPECT_TRUE(bitwise_equal(read(manifest, 2, OptimizerTensor::kMaster), master));
  EXPECT_TRUE(bitwise_equal(read(manifest, 2, OptimizerTensor::kAdamM), m));
  EXPECT_TRUE(bitwise_equal(read(manifest, 2, OptimizerTensor::kAdamV), v));
  EXPECT_TRUE(bitwise_equal(read(manifest, 3, OptimizerTensor::kMaster), bf16));

  // A range inside the group, widened from where it starts.
  CheckpointRangeReader reader(dir_, manifest);
  std::vector<float> part(100);
  reader.read(1, OptimizerTensor::kMaster, {1234, 100}, part.data());
  EXPECT_TRUE(bitwise_equal(part, std::vector<float>(fp16.begin() + 1234, fp16.begin() + 1334)));
}

TEST_F(CheckpointRankFile, AValueTheWorkingTypeDoesNotHoldIsRefusedNotRounded) {
  // Past the first narrowing chunk (2^20 elements), in a rank's range that starts at 500.
  const int64_t n = (int64_t{1} << 20) + 64;
  std::vector<float> values = exact_values(DType::kBf16, n);
  values[n - 47] = 1.0f + 1.0f / 1024;  // exact in fp16, not in bf16
  try {
    write({{0, {500, n}, values.data(), nullptr, nullptr, DType::kBf16}});
    FAIL() << "a value bf16 does not hold was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element " + std::to_string(500 + n - 47) +
                                         " (1.000977) of frozen group 0"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("not exact in bfloat16"), std::string::npos) << e.what();
  }
  values[n - 47] = 65536.0f;  // exact in bf16, past fp16's largest finite value
  EXPECT_THROW(write({{0, {0, n}, values.data(), nullptr, nullptr, DType::kFloat16}}), Error);
}

// Group 0 of a one-rank file written by hand, its datasets `tensors` (name, stored type) of n
// zeros each, and the manifest that lists it.
CheckpointManifest write_by_hand(const std::string& dir, int64_t n,
                                 const std::vector<std::pair<std::string, DType>>& tensors) {
  const std::string path = dir + "/" + checkpoint_rank_file_name(0);
  {
    h5::Id f = h5::create_file(path);
    h5::write_attr_int64(f, "rank", 0, path);
    h5::Id g = h5::wrap(H5Gcreate2(f, "group_000", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                        "cannot create group", path);
    const std::vector<uint32_t> zeros(static_cast<size_t>(n), 0);  // zero bits in either width
    for (const auto& [tensor, type] : tensors) {
      const std::string name = "/group_000/" + tensor;
      h5::Id ds = h5::create_dataset(f, name, type, {n}, name);
      h5::write_attr_int64(ds, "begin", 0, name);
      h5::write_attr_int64(ds, "count", n, name);
      h5::write_box(ds, type, {0}, {n}, zeros.data(), name);
    }
  }
  const FileChecksum sum = crc32c_file(path);
  CheckpointManifest m;
  m.world_size = 1;
  m.groups.push_back({n, n, {{0, n}}, ""});
  m.files.push_back({checkpoint_rank_file_name(0), sum.crc32c, sum.bytes});
  return m;
}

TEST_F(CheckpointRankFile, SixteenBitsAnywhereButAFrozenGroupsValuesAreRefusedNamingTheDataset) {
  const int64_t n = 8;
  std::vector<float> zeros(n, 0.0f);
  // The writer itself refuses a trained group in 16 bits, so these files are written by hand.
  EXPECT_THROW(write({{0, {0, n}, zeros.data(), zeros.data(), zeros.data(), DType::kBf16}}), Error);
  struct Case {
    std::vector<std::pair<std::string, DType>> tensors;
    OptimizerTensor read;
    std::string named;
  };
  const std::vector<Case> cases = {
      // A bf16 master beside moments: a trained group's, which float32 holds.
      {{{"master", DType::kBf16}, {"m", DType::kFloat32}, {"v", DType::kFloat32}},
       OptimizerTensor::kMaster,
       "/group_000/master has element type bfloat16"},
      // A 16-bit moment, even without the other beside it.
      {{{"master", DType::kFloat32}, {"v", DType::kFloat16}},
       OptimizerTensor::kAdamV,
       "/group_000/v has element type float16"},
  };
  for (const Case& c : cases) {
    const CheckpointManifest m = write_by_hand(dir_, n, c.tensors);
    try {
      read(m, 0, c.read);
      ADD_FAILURE() << "read despite " << c.named;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.named), std::string::npos) << e.what();
    }
  }
}

// A frozen group kept as a digest has no HDF5 group in the file; the reader refuses to read it,
// naming the group, and the groups around it read back as written.
TEST_F(CheckpointRankFile, AGroupKeptAsADigestIsNotStored) {
  const int64_t n = 1000;
  const std::vector<float> bf16 = exact_values(DType::kBf16, n);
  OptimizerSlice kept{1, {0, n}, bf16.data(), nullptr, nullptr, DType::kBf16};
  kept.stored = false;
  CheckpointManifest manifest = write({{0, {0, n}, bf16.data(), nullptr, nullptr, DType::kBf16},
                                       kept,
                                       {2, {0, n}, bf16.data(), nullptr, nullptr, DType::kBf16}});
  manifest.groups[1].frozen_values_digest =
      frozen_digest_text(frozen_values_digest(bf16.data(), 0, n));
  h5::Id f = h5::open_file(dir_ + "/" + checkpoint_rank_file_name(0));
  EXPECT_TRUE(h5::has_dataset(f, "/group_000"));
  EXPECT_FALSE(h5::has_dataset(f, "/group_001"));
  EXPECT_TRUE(bitwise_equal(read(manifest, 2, OptimizerTensor::kMaster), bf16));
  try {
    read(manifest, 1, OptimizerTensor::kMaster);
    FAIL() << "a group kept as a digest was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keeps the frozen values of group 1 as their digest"),
              std::string::npos)
        << e.what();
  }
}

// The digest adds up over any split of a group into ranks' ranges, and changes with any one bit of
// a value, the sign of a zero, or which element holds a value.
TEST(FrozenValuesDigest, AddsUpOverRangesAndSeesEveryBit) {
  const int64_t n = 4099;
  std::vector<float> v = exact_values(DType::kBf16, n);
  const uint64_t whole = frozen_values_digest(v.data(), 0, n);
  for (const int64_t split : {int64_t{1}, int64_t{1024}, int64_t{4098}}) {
    const uint64_t parts = frozen_values_digest(v.data(), 0, split) +
                           frozen_values_digest(v.data() + split, split, n - split);
    EXPECT_EQ(parts, whole) << "split at " << split;
  }
  EXPECT_NE(frozen_values_digest(v.data() + 1, 1, n - 1), whole);  // element 0 left out
  EXPECT_NE(frozen_values_digest(v.data(), 1, n), whole);          // the same values, shifted
  for (const int64_t at : {int64_t{0}, int64_t{2047}, n - 1}) {
    for (int bit = 0; bit < 32; bit += 7) {
      std::vector<float> w = v;
      uint32_t bits;
      std::memcpy(&bits, &w[static_cast<size_t>(at)], sizeof bits);
      bits ^= uint32_t{1} << bit;
      std::memcpy(&w[static_cast<size_t>(at)], &bits, sizeof bits);
      EXPECT_NE(frozen_values_digest(w.data(), 0, n), whole) << "element " << at << " bit " << bit;
    }
  }
  std::vector<float> swapped = v;
  std::swap(swapped[10], swapped[11]);
  ASSERT_NE(v[10], v[11]);
  EXPECT_NE(frozen_values_digest(swapped.data(), 0, n), whole);
  const float zeros[2] = {0.0f, -0.0f}, same[2] = {0.0f, 0.0f};
  EXPECT_NE(frozen_values_digest(zeros, 0, 2), frozen_values_digest(same, 0, 2));
  EXPECT_EQ(frozen_values_digest(v.data(), 0, 0), 0u);
  EXPECT_EQ(frozen_digest_text(0xabcull), "splitmix64-sum:0000000000000abc");
}

}  // namespace
}  // namespace zt

#include "checkpoint/checkpoint_files.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "io/fs_util.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "util/splitmix64.h"
#include "util/tensor_view.h"

namespace zt {

namespace {

std::string dataset_path(int group, OptimizerTensor kind) {
  return "/" + checkpoint_group_name(group) + "/" + optimizer_tensor_name(kind);
}

const float* slice_data(const OptimizerSlice& s, OptimizerTensor kind) {
  switch (kind) {
    case OptimizerTensor::kMaster:
      return s.master;
    case OptimizerTensor::kAdamM:
      return s.m;
    case OptimizerTensor::kAdamV:
      return s.v;
  }
  return nullptr;
}

bool is_16bit_float(DType t) {
  return t == DType::kBf16 || t == DType::kFloat16;
}

// Elements per narrowing pass: the 16-bit copy and its check stay small beside a large frozen
// group (an embedding of 131M elements).
constexpr int64_t kNarrowChunk = int64_t{1} << 20;

// A frozen group's values `s.master` written into `ds` in the 16-bit type `dtype` they were
// widened from, a chunk at a time. Exact by construction; a value that would not survive the round
// trip is refused rather than lost, naming its element of the group.
void write_narrowed_exactly(hid_t ds, const OptimizerSlice& s, DType dtype,
                            const std::string& where) {
  std::vector<uint16_t> narrow(static_cast<size_t>(std::min(kNarrowChunk, s.range.count)));
  std::vector<float> back(narrow.size());
  for (int64_t c0 = 0; c0 < s.range.count; c0 += kNarrowChunk) {
    const int64_t n = std::min(kNarrowChunk, s.range.count - c0);
    const float* values = s.master + c0;
    const size_t count = static_cast<size_t>(n);
    round_16bit(dtype, values, narrow.data(), count);
    widen_16bit(dtype, narrow.data(), back.data(), count);
    for (size_t i = 0; i < count; ++i)
      ZT_CHECK(std::memcmp(&back[i], &values[i], sizeof(float)) == 0 ||
                   (std::isnan(back[i]) && std::isnan(values[i])),
               "checkpoint " + where + ": element " +
                   std::to_string(s.range.begin + c0 + static_cast<int64_t>(i)) + " (" +
                   std::to_string(values[i]) + ") of frozen group " + std::to_string(s.group) +
                   " is not exact in " + dtype_name(dtype));
    h5::write_box(ds, dtype, {c0}, {n}, narrow.data(), where);
  }
}

void write_slice(hid_t file, const OptimizerSlice& s, const std::string& path) {
  if (!s.stored) return;  // a frozen group kept as its digest
  const std::string group_where = "'" + path + "' " + checkpoint_group_name(s.group);
  h5::Id group = h5::wrap(H5Gcreate2(file, checkpoint_group_name(s.group).c_str(), H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT),
                          H5Gclose, "cannot create HDF5 group", group_where);
  for (OptimizerTensor kind : kOptimizerTensors) {
    // A frozen group has its values (as /master) and no moments.
    if (kind != OptimizerTensor::kMaster && s.m == nullptr) continue;
    const std::string name = dataset_path(s.group, kind);
    const std::string where = "'" + path + "' " + name;
    const DType stored = kind == OptimizerTensor::kMaster ? s.master_dtype : DType::kFloat32;
    ZT_CHECK(stored == DType::kFloat32 || (is_16bit_float(stored) && s.m == nullptr),
             "checkpoint " + where + ": only a frozen group's values are stored in " +
                 dtype_name(stored));
    h5::Id ds = h5::create_dataset(file, name, stored, {s.range.count}, where);
    h5::write_attr_int64(ds, "begin", s.range.begin, where);
    h5::write_attr_int64(ds, "count", s.range.count, where);
    if (s.range.count > 0 && stored == DType::kFloat32)
      h5::write_box(ds, stored, {0}, {s.range.count}, slice_data(s, kind), where);
    else if (s.range.count > 0)
      write_narrowed_exactly(ds, s, stored, where);
    ds.close(where);
  }
  group.close(group_where);
}

}  // namespace

uint64_t frozen_values_digest(const float* values, int64_t first, int64_t count) {
  uint64_t sum = 0;  // unsigned: wraps modulo 2^64, so the order of the terms does not matter
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof bits);
    sum += splitmix64(splitmix64(static_cast<uint64_t>(first + i)) ^ bits);
  }
  return sum;
}

std::string frozen_digest_text(uint64_t digest) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  return std::string(kFrozenDigestPrefix) + hex;
}

const char* optimizer_tensor_name(OptimizerTensor t) {
  switch (t) {
    case OptimizerTensor::kMaster:
      return "master";
    case OptimizerTensor::kAdamM:
      return "m";
    case OptimizerTensor::kAdamV:
      return "v";
  }
  return "?";
}

CheckpointFile write_checkpoint_rank_file(const std::string& dir, int rank, int num_groups,
                                          const OptimizerSliceSource& slice_of,
                                          const RankFileFaults& faults) {
  CheckpointFile entry;
  entry.name = checkpoint_rank_file_name(rank);
  const std::string path = dir + "/" + entry.name;
  {
    h5::Id file = h5::create_file(path);
    h5::write_attr_int64(file, "rank", rank, "'" + path + "'");
    for (int g = 0; g < num_groups; ++g) {
      write_slice(file, slice_of(g), path);
      ZT_CHECK(!faults.fail_write,
               "cannot write checkpoint file '" + path + "': injected write failure");
      if (faults.stall_seconds > 0 && g + 1 == (num_groups + 1) / 2) {
        // The part written so far reaches the file before the stall.
        h5::check(H5Fflush(file, H5F_SCOPE_LOCAL), "H5Fflush failed", "'" + path + "'");
        std::this_thread::sleep_for(std::chrono::duration<double>(faults.stall_seconds));
      }
    }
    file.close("'" + path + "'");
  }
  fsync_path(path);
  const FileChecksum sum = crc32c_file(path);
  entry.crc32c = sum.crc32c;
  entry.bytes = sum.bytes;
  return entry;
}

void verify_checkpoint_file(const std::string& dir, const CheckpointFile& entry) {
  const std::string path = dir + "/" + entry.name;
  const FileChecksum sum = crc32c_file(path);
  ZT_CHECK(sum.bytes == entry.bytes, "checkpoint file '" + path + "' has " +
                                         std::to_string(sum.bytes) + " bytes, the manifest says " +
                                         std::to_string(entry.bytes) + " (truncated or replaced)");
  ZT_CHECK(sum.crc32c == entry.crc32c, "checkpoint file '" + path + "' is corrupt: CRC-32C " +
                                           crc32c_hex(sum.crc32c) + ", the manifest says " +
                                           crc32c_hex(entry.crc32c));
}

CheckpointRangeReader::CheckpointRangeReader(std::string dir, const CheckpointManifest& manifest)
    : dir_(std::move(dir)), manifest_(manifest) {}

hid_t CheckpointRangeReader::file(int rank) {
  auto it = open_.find(rank);
  if (it != open_.end()) return it->second;
  const CheckpointFile& entry = manifest_.files[static_cast<size_t>(rank)];
  verify_checkpoint_file(dir_, entry);
  const std::string path = dir_ + "/" + entry.name;
  h5::Id f = h5::open_file(path);
  const int64_t stored_rank = h5::read_attr_int64(f, "rank", "'" + path + "'");
  ZT_CHECK(stored_rank == rank, "checkpoint file '" + path + "' belongs to rank " +
                                    std::to_string(stored_rank) + ", expected " +
                                    std::to_string(rank));
  return open_.emplace(rank, std::move(f)).first->second;
}

void CheckpointRangeReader::read(int group, OptimizerTensor kind, ElementRange range, float* out) {
  const CheckpointGroup& g = manifest_.groups.at(static_cast<size_t>(group));
  ZT_CHECK(range.begin >= 0 && range.count >= 0 && range.end() <= g.numel,
           "checkpoint read outside group " + std::to_string(group));
  ZT_CHECK(g.frozen_values_digest.empty(),
           "checkpoint '" + dir_ + "' keeps the frozen values of group " + std::to_string(group) +
               " as their digest, not the values");
  for (size_t r = 0; r < g.ranges.size(); ++r) {
    const ElementRange& held = g.ranges[r];
    const int64_t lo = std::max(range.begin, held.begin);
    const int64_t hi = std::min(range.end(), held.end());
    if (lo >= hi) continue;
    const int rank = static_cast<int>(r);
    const hid_t f = file(rank);
    const std::string name = dataset_path(group, kind);
    const std::string where = "'" + dir_ + "/" + manifest_.files[r].name + "' " + name;
    h5::Id ds = h5::open_dataset(f, name, where);
    ZT_CHECK(h5::read_attr_int64(ds, "begin", where) == held.begin &&
                 h5::read_attr_int64(ds, "count", where) == held.count &&
                 h5::dataset_shape(ds, where) == std::vector<int64_t>{held.count},
             "checkpoint dataset " + where + " does not hold the range the manifest lists");
    read_values(f, ds, group, kind, {lo - held.begin, hi - lo}, out + (lo - range.begin), where);
  }
}

// Elements `at` of dataset `ds` as float32: float32 as stored, a frozen group's 16-bit values
// (no moments beside them) widened.
void CheckpointRangeReader::read_values(hid_t f, hid_t ds, int group, OptimizerTensor kind,
                                        ElementRange at, float* out, const std::string& where) {
  const DType stored = h5::dataset_dtype(ds, where);
  if (stored == DType::kFloat32) {
    h5::read_box(ds, stored, {at.begin}, {at.count}, out, where);
    return;
  }
  ZT_CHECK(is_16bit_float(stored) && kind == OptimizerTensor::kMaster &&
               !h5::has_dataset(f, dataset_path(group, OptimizerTensor::kAdamM)),
           "checkpoint dataset " + where + " has element type " + dtype_name(stored) +
               ", expected float32 (bfloat16 or float16 only for a frozen group's values)");
  std::vector<uint16_t> narrow(static_cast<size_t>(at.count));
  h5::read_box(ds, stored, {at.begin}, {at.count}, narrow.data(), where);
  widen_16bit(stored, narrow.data(), out, narrow.size());
}

std::vector<int> CheckpointRangeReader::files_opened() const {
  std::vector<int> ranks;
  for (const auto& [rank, id] : open_) ranks.push_back(rank);
  return ranks;
}

}  // namespace zt

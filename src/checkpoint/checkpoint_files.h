// The per-rank HDF5 files of a training checkpoint. Rank file r holds, for every group g,
// elements ranges[g][r] of the group's fp32 master weights and Adam moments as three 1-D float32
// datasets /group_GGG/{master,m,v} with int64 attributes `begin` and `count` (group
// coordinates); a frozen group (model/trainable.h) has only /master, its values, stored in the
// working dtype that holds them exactly (bfloat16 or float16 under 16-bit precision: half the
// bytes of float32; checkpoints before 2026-11-30 stored them as float32, which still load).
// Readers take any element range of a group from whichever files hold it (hyperslab reads), so a
// checkpoint written at N ranks loads at any other world size or stage. A frozen group kept as
// a digest (--checkpoint-frozen digest, LoRA's default) has no HDF5 group at all: the manifest
// holds frozen_values_digest of its values instead, and a resume reloads and verifies them.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_manifest.h"
#include "io/hdf5_util.h"

namespace zt {

enum class OptimizerTensor { kMaster, kAdamM, kAdamV };
constexpr OptimizerTensor kOptimizerTensors[] = {OptimizerTensor::kMaster, OptimizerTensor::kAdamM,
                                                 OptimizerTensor::kAdamV};
const char* optimizer_tensor_name(OptimizerTensor t);  // "master", "m", "v"

// One group's slice of optimizer state in memory: elements `range` of the group.
struct OptimizerSlice {
  int group = 0;
  ElementRange range;
  const float* master = nullptr;
  const float* m = nullptr;  // null (with v) for a frozen group: no moments are written
  const float* v = nullptr;
  // The type /master is stored in: float32, or a frozen group's working dtype (bfloat16,
  // float16), in which its values are exact.
  DType master_dtype = DType::kFloat32;
  // False for a frozen group kept as its digest: the file gets no /group_GGG for it.
  bool stored = true;
};

// The digest of a frozen group's values that a checkpoint keeps in their place:
//   Σ_i splitmix64(splitmix64(i) ^ bits(v_i))  mod 2^64
// over elements i in [first, first + count) of the group (i counted from the group's start),
// bits(v) the 32 bits of the value as float32 (a 16-bit working value widened exactly). A sum,
// so each rank digests its own range and the ranks' digests add up to the same total at every
// world size and stage. docs/checkpoints-and-formats.md gives it for other tools to recompute.
uint64_t frozen_values_digest(const float* values, int64_t first, int64_t count);
// "splitmix64-sum:" and 16 lowercase hex digits, as the manifest stores it.
std::string frozen_digest_text(uint64_t digest);

// Fault injection for tests of the crash-safety protocol.
struct RankFileFaults {
  bool fail_write = false;   // fail after the first group, as a full disk would
  double stall_seconds = 0;  // sleep after half of the groups are written
};

// Group g's slice, valid until the source is called again (so that a source backed by NVMe
// stages one group at a time).
using OptimizerSliceSource = std::function<OptimizerSlice(int g)>;

// Writes `dir`/rank-RRRRR.h5 with the slices of groups 0..num_groups-1, asked for in order,
// closes and fsyncs it, then checksums its bytes. Errors name the file.
CheckpointFile write_checkpoint_rank_file(const std::string& dir, int rank, int num_groups,
                                          const OptimizerSliceSource& slice_of,
                                          const RankFileFaults& faults);

// Verifies a rank file's size and CRC-32C against the manifest entry; the error names the file.
void verify_checkpoint_file(const std::string& dir, const CheckpointFile& entry);

// Reads element ranges of a checkpoint's groups, opening (and first verifying) only the rank
// files that hold them.
class CheckpointRangeReader {
 public:
  CheckpointRangeReader(std::string dir, const CheckpointManifest& manifest);

  // Elements `range` (inside [0, numel)) of group g's tensor `kind` into out[0, range.count).
  void read(int group, OptimizerTensor kind, ElementRange range, float* out);
  // Ranks whose files were read so far.
  std::vector<int> files_opened() const;

 private:
  hid_t file(int rank);
  void read_values(hid_t f, hid_t ds, int group, OptimizerTensor kind, ElementRange at, float* out,
                   const std::string& where);

  std::string dir_;
  const CheckpointManifest& manifest_;
  std::map<int, h5::Id> open_;
};

}  // namespace zt

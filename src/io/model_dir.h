// Model directory (docs/ARCHITECTURE.md §3): config.json, model.h5.index.json and HDF5 shards
// model-0000i-of-0000K.h5 with one dataset per tensor (bf16 or fp32), split at tensor boundaries.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/hdf5_util.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/tensor_source.h"
#include "util/bf16.h"

namespace zt {

constexpr uint64_t kDefaultShardLimitBytes = 2ull << 30;  // 2 GiB
constexpr const char* kModelIndexFile = "model.h5.index.json";
constexpr const char* kModelConfigFile = "config.json";

// "model-00002-of-00005.h5" (extension "h5"), "model-00001-of-00001.safetensors", ...
std::string model_shard_file_name(int index, int count, const std::string& extension = "h5");

// The sharding rule of model directories and exports: shards split at tensor boundaries, and a
// tensor starts a new shard when the current one is non-empty and would pass the limit.
inline bool starts_new_shard(uint64_t shard_bytes, uint64_t tensor_bytes, uint64_t limit) {
  return shard_bytes > 0 && shard_bytes + tensor_bytes > limit;
}
// The rule applied to tensors of these sizes in writing order: each one's shard (1-based).
std::vector<int> plan_shards(const std::vector<uint64_t>& tensor_bytes, uint64_t limit);

// The bytes a bf16 model directory of `config` takes on disk: its tensors, plus HDF5's metadata (a
// few KiB per dataset) and the JSON files. Writers check for this much room before starting.
uint64_t model_dir_bytes(const ModelConfig& config);

// Writes (and fsyncs) DIR/config.json: the model's Hugging Face LlamaConfig.
void write_model_config_file(const std::string& dir, const ModelConfig& config);
// Writes (and fsyncs) an index file {"metadata":{"total_size":N},"weight_map":{tensor: file}}.
void write_weight_index_file(const std::string& path,
                             const std::map<std::string, std::string>& weight_map,
                             uint64_t total_bytes);

// Writes a model directory into a temporary sibling (DIR.tmp-<pid>) and moves it into place on
// finish(); without finish() (an exception, say) the temporary directory is removed.
class ModelDirWriter {
 public:
  ModelDirWriter(std::string dir, const ModelConfig& config,
                 uint64_t shard_limit_bytes = kDefaultShardLimitBytes, bool overwrite = false);
  ~ModelDirWriter();
  ModelDirWriter(const ModelDirWriter&) = delete;
  ModelDirWriter& operator=(const ModelDirWriter&) = delete;

  // Writes a whole tensor (bf16 or fp32 storage according to the pointer type).
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, const bf16_t* data);
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* data);

  // Streaming: begin a tensor, write its rows in order (a row is shape[1] elements of a 2-D
  // tensor, one element of a 1-D tensor), end it. The data type must match `dtype`.
  void begin_tensor(const std::string& name, const std::vector<int64_t>& shape, DType dtype);
  void write_rows(const bf16_t* rows, int64_t num_rows);
  void write_rows(const float* rows, int64_t num_rows);
  void end_tensor();

  // A file written beside the model (tokenizer files, import.json) before finish() moves the
  // directory into place, so that it appears with the model or not at all.
  void add_file(const std::string& name, const std::string& contents);

  // Writes config.json and the index, renames shards, fsyncs, moves the directory into place.
  void finish();

 private:
  void write_rows_raw(const void* rows, int64_t num_rows, DType dtype);
  void open_new_shard();
  void close_shard();  // errors name the file and, where the filesystem tells, why
  std::string shard_tmp_name(int index) const;

  std::string dir_, tmp_dir_;
  ModelConfig config_;
  uint64_t shard_limit_;
  bool overwrite_;
  bool finished_ = false;
  int num_shards_ = 0;
  uint64_t shard_bytes_ = 0;
  uint64_t total_bytes_ = 0;
  h5::Id shard_file_;
  std::map<std::string, int> tensor_shard_;  // tensor name -> shard index (1-based)
  // The tensor being streamed.
  h5::Id dataset_;
  std::string tensor_name_;
  std::vector<int64_t> tensor_shape_;
  DType tensor_dtype_ = DType::kBf16;
  int64_t rows_written_ = 0;
};

// Reads and validates a model directory. Tensors are read one at a time (or a flat range of
// one), converting between bf16 and fp32 as asked; values are checked finite by default.
class ModelDirReader : public TensorSource {
 public:
  explicit ModelDirReader(const std::string& dir, bool check_finite = true);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const override { return config_; }
  std::string description() const override { return "model directory '" + dir_ + "'"; }
  void read_range_f32(const TensorInfo& t, int64_t begin, int64_t count, float* out) override {
    read_tensor_range_f32(t.name, begin, count, out);
  }
  const ParamLayout& layout() const { return layout_; }
  uint64_t total_size() const { return total_size_; }  // from the index
  const std::string& shard_of(const std::string& name) const;
  std::vector<std::string> shard_files() const;

  // Stored type of a tensor after checking its shape and type against the layout.
  DType stored_dtype(const std::string& name);

  void read_tensor_f32(const std::string& name, float* out);
  void read_tensor_bf16(const std::string& name, bf16_t* out);
  // Elements [begin, begin+count) of the flattened tensor.
  void read_tensor_range_f32(const std::string& name, int64_t begin, int64_t count, float* out);
  void read_tensor_range_bf16(const std::string& name, int64_t begin, int64_t count, bf16_t* out);

 private:
  const TensorInfo& info(const std::string& name) const;
  h5::Id open_checked(const std::string& name, DType* stored);
  void read_range(const std::string& name, int64_t begin, int64_t count, DType want, void* out);
  hid_t shard_file(const std::string& file);

  std::string dir_;
  bool check_finite_;
  ModelConfig config_;
  ParamLayout layout_;
  uint64_t total_size_ = 0;
  std::map<std::string, std::string> weight_map_;  // tensor -> shard file name
  std::map<std::string, h5::Id> open_files_;
};

// Fills out[0, count) with elements [begin, begin+count) of tensor t as fp32.
using TensorValuesFn =
    std::function<void(const TensorInfo& t, int64_t begin, int64_t count, float* out)>;

// Streams every tensor of the config's layout, in layout order, into a bf16 model directory, a
// bounded row chunk (≤ 64 MiB of fp32) at a time, taking the values from `values`; `files` (name
// -> contents) are written beside the model and appear with it. Returns the tensor bytes written.
uint64_t write_model_dir_streaming(const std::string& dir, const ModelConfig& config,
                                   const TensorValuesFn& values,
                                   uint64_t shard_limit_bytes = kDefaultShardLimitBytes,
                                   bool overwrite = false,
                                   const std::map<std::string, std::string>& files = {});

// Streams the deterministic initialisation (model/init.h) of every tensor into a bf16 model
// directory (write_model_dir_streaming).
void write_model_dir_from_init(const std::string& dir, const ModelConfig& config, uint64_t seed,
                               uint64_t shard_limit_bytes = kDefaultShardLimitBytes,
                               bool overwrite = false);

}  // namespace zt

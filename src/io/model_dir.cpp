#include "io/model_dir.h"

#include "io/weight_file.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <type_traits>

#include "io/fs_util.h"
#include "io/peft_adapter_file.h"
#include "io/tokenizer_files.h"
#include "model/init.h"
#include "util/error.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kReadChunkElems = int64_t{4} << 20;     // conversion buffer bound
constexpr int64_t kStreamChunkBytes = int64_t{64} << 20;  // fp32 streaming chunk bound

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t row_elems(const std::vector<int64_t>& shape) {
  return shape.size() <= 1 ? 1 : numel_of(shape) / shape[0];
}

}  // namespace

std::string model_shard_file_name(int index, int count, const std::string& extension) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.", index, count);
  return buf + extension;
}

std::vector<int> plan_shards(const std::vector<uint64_t>& tensor_bytes, uint64_t limit) {
  std::vector<int> shard_of;
  int shard = 0;
  uint64_t shard_bytes = 0;
  for (uint64_t bytes : tensor_bytes) {
    if (shard == 0 || starts_new_shard(shard_bytes, bytes, limit)) {
      ++shard;
      shard_bytes = 0;
    }
    shard_bytes += bytes;
    shard_of.push_back(shard);
  }
  return shard_of;
}

uint64_t model_dir_bytes(const ModelConfig& config) {
  const ParamLayout layout(config);
  return static_cast<uint64_t>(layout.total_numel()) * sizeof(bf16_t) + (64u << 10) +
         (4u << 10) * layout.tensors().size();
}

void write_model_config_file(const std::string& dir, const ModelConfig& config) {
  write_text_file(dir + "/" + kModelConfigFile, config.to_hf_json().dump(2) + "\n");
}

void write_weight_index_file(const std::string& path,
                             const std::map<std::string, std::string>& weight_map,
                             uint64_t total_bytes) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, file] : weight_map) files[name] = file;
  const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", files}};
  write_text_file(path, index.dump(2) + "\n");
}

// ---------------------------------------------------------------------------------------------
// ModelDirWriter

ModelDirWriter::ModelDirWriter(std::string dir, const ModelConfig& config,
                               uint64_t shard_limit_bytes, bool overwrite)
    : dir_(strip_trailing_slashes(dir)),
      tmp_dir_(temp_sibling(dir_)),
      config_(config),
      shard_limit_(shard_limit_bytes),
      overwrite_(overwrite) {
  config_.validate();
  ZT_CHECK(shard_limit_ > 0, "shard size limit must be positive");
  check_output_dir_writable(dir_, overwrite_);
  check_room_to_write(dir_parent(dir_), model_dir_bytes(config_), "model '" + dir_ + "'");
  std::error_code ec;
  fs::remove_all(tmp_dir_, ec);
  if (!dir_parent(dir_).empty()) fs::create_directories(dir_parent(dir_), ec);
  fs::create_directory(tmp_dir_, ec);
  ZT_CHECK(!ec, "cannot create temporary directory '" + tmp_dir_ + "': " + ec.message());
}

ModelDirWriter::~ModelDirWriter() {
  if (finished_) return;
  dataset_.reset();
  shard_file_.reset();
  std::error_code ec;
  fs::remove_all(tmp_dir_, ec);
}

void ModelDirWriter::close_shard() {
  const std::string shard = shard_tmp_name(num_shards_);
  try {
    shard_file_.close("'" + shard + "'");
  } catch (const Error& e) {
    fail(e.what() + write_failure_cause(shard));
  }
}

std::string ModelDirWriter::shard_tmp_name(int index) const {
  return tmp_dir_ + "/shard-" + std::to_string(index) + ".h5";
}

void ModelDirWriter::open_new_shard() {
  if (shard_file_.valid()) close_shard();
  ++num_shards_;
  shard_file_ = h5::create_file(shard_tmp_name(num_shards_));
  shard_bytes_ = 0;
}

void ModelDirWriter::begin_tensor(const std::string& name, const std::vector<int64_t>& shape,
                                  DType dtype) {
  ZT_CHECK(!finished_, "model writer for '" + dir_ + "' is already finished");
  ZT_CHECK(!dataset_.valid(),
           "begin_tensor('" + name + "') while tensor '" + tensor_name_ + "' is still open");
  ZT_CHECK(dtype == DType::kBf16 || dtype == DType::kFloat32,
           "tensor '" + name + "': model tensors are bfloat16 or float32");
  ZT_CHECK(!tensor_shard_.count(name), "tensor '" + name + "' written twice");
  ZT_CHECK(!shape.empty() && shape.size() <= 2,
           "tensor '" + name + "': shape must be 1-D or 2-D, got " + h5::shape_string(shape));
  const uint64_t bytes = static_cast<uint64_t>(numel_of(shape)) * dtype_size(dtype);
  if (!shard_file_.valid() || starts_new_shard(shard_bytes_, bytes, shard_limit_)) open_new_shard();
  const std::string where = "tensor '" + name + "' in '" + shard_tmp_name(num_shards_) + "'";
  dataset_ = h5::create_dataset(shard_file_, name, dtype, shape, where);
  tensor_name_ = name;
  tensor_shape_ = shape;
  tensor_dtype_ = dtype;
  rows_written_ = 0;
  shard_bytes_ += bytes;
  total_bytes_ += bytes;
  tensor_shard_[name] = num_shards_;
}

void ModelDirWriter::write_rows_raw(const void* rows, int64_t num_rows, DType dtype) {
  ZT_CHECK(dataset_.valid(), "write_rows without begin_tensor");
  ZT_CHECK(dtype == tensor_dtype_, "tensor '" + tensor_name_ + "' is stored as " +
                                       dtype_name(tensor_dtype_) + " but rows are " +
                                       dtype_name(dtype));
  ZT_CHECK(num_rows >= 0 && rows_written_ + num_rows <= tensor_shape_[0],
           "tensor '" + tensor_name_ + "': too many rows written");
  if (num_rows == 0) return;
  std::vector<int64_t> start(tensor_shape_.size(), 0), count = tensor_shape_;
  start[0] = rows_written_;
  count[0] = num_rows;
  const std::string shard = shard_tmp_name(num_shards_);
  try {
    h5::write_box(dataset_, dtype, start, count, rows,
                  "tensor '" + tensor_name_ + "' of '" + shard + "'");
  } catch (const Error& e) {
    fail(e.what() + write_failure_cause(shard));
  }
  rows_written_ += num_rows;
}

void ModelDirWriter::write_rows(const bf16_t* rows, int64_t num_rows) {
  write_rows_raw(rows, num_rows, DType::kBf16);
}

void ModelDirWriter::write_rows(const float* rows, int64_t num_rows) {
  write_rows_raw(rows, num_rows, DType::kFloat32);
}

void ModelDirWriter::end_tensor() {
  ZT_CHECK(dataset_.valid(), "end_tensor without begin_tensor");
  ZT_CHECK(rows_written_ == tensor_shape_[0],
           "tensor '" + tensor_name_ + "': " + std::to_string(rows_written_) + " of " +
               std::to_string(tensor_shape_[0]) + " rows written");
  const std::string shard = shard_tmp_name(num_shards_);
  try {
    dataset_.close("tensor '" + tensor_name_ + "' of '" + shard + "'");
  } catch (const Error& e) {
    fail(e.what() + write_failure_cause(shard));
  }
}

void ModelDirWriter::add_tensor(const std::string& name, const std::vector<int64_t>& shape,
                                const bf16_t* data) {
  begin_tensor(name, shape, DType::kBf16);
  write_rows(data, shape[0]);
  end_tensor();
}

void ModelDirWriter::add_tensor(const std::string& name, const std::vector<int64_t>& shape,
                                const float* data) {
  begin_tensor(name, shape, DType::kFloat32);
  write_rows(data, shape[0]);
  end_tensor();
}

void ModelDirWriter::add_file(const std::string& name, const std::string& contents) {
  ZT_CHECK(!finished_, "model writer for '" + dir_ + "' is already finished");
  if (!named_chat_template_name(name).empty())
    return write_tokenizer_file(tmp_dir_, name, contents);
  ZT_CHECK(name.find('/') == std::string::npos && name != "." && name != "..",
           "'" + name + "' is not a file name for model directory '" + dir_ + "'");
  write_text_file(tmp_dir_ + "/" + name, contents);
}

void ModelDirWriter::finish() {
  ZT_CHECK(!finished_, "model writer for '" + dir_ + "' finished twice");
  ZT_CHECK(!dataset_.valid(), "finish() while tensor '" + tensor_name_ + "' is still open");
  if (shard_file_.valid()) close_shard();
  std::vector<std::string> files;
  for (int i = 1; i <= num_shards_; ++i) {
    const std::string final_name = model_shard_file_name(i, num_shards_);
    fs::rename(shard_tmp_name(i), tmp_dir_ + "/" + final_name);
    files.push_back(final_name);
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, shard] : tensor_shard_)
    weight_map[name] = files[static_cast<size_t>(shard - 1)];
  write_weight_index_file(tmp_dir_ + "/" + kModelIndexFile, weight_map, total_bytes_);
  write_model_config_file(tmp_dir_, config_);
  for (const auto& f : files) fsync_path(tmp_dir_ + "/" + f);
  fsync_path(tmp_dir_);
  move_into_place(tmp_dir_, dir_, overwrite_);
  finished_ = true;
}

// ---------------------------------------------------------------------------------------------
// ModelDirReader

namespace {

ModelConfig load_model_config(const std::string& dir) {
  ZT_CHECK(fs::is_directory(dir), "model directory '" + dir + "' " +
                                      (fs::exists(dir) ? "is not a directory" : "does not exist"));
  const std::string path = dir + "/" + kModelConfigFile;
  ZT_CHECK(fs::exists(path) || !fs::exists(dir + "/" + kPeftConfigFile),
           "model directory '" + dir + "' has no " + kModelConfigFile + ": it holds a PEFT " +
               "adapter (" + kPeftConfigFile + "); give its base model here, and the adapter " +
               "with --adapter (eval, generate), --lora-init-from (train) or --merge-lora " +
               "(export)");
  ZT_CHECK(fs::exists(path),
           "model directory '" + dir + "' has no " + kModelConfigFile +
               (fs::exists(dir + "/final/" + kModelConfigFile)
                    ? " (a training run's output: its model is '" + dir + "/final')"
                    : ""));
  return ModelConfig::from_hf_file(path);
}

template <typename T>
bool all_finite(const T* data, int64_t n, int64_t* bad_index) {
  for (int64_t i = 0; i < n; ++i) {
    bool ok;
    if constexpr (std::is_same_v<T, float>) {
      ok = std::isfinite(data[i]);
    } else {
      ok = (data[i] & 0x7f80u) != 0x7f80u;
    }
    if (!ok) {
      *bad_index = i;
      return false;
    }
  }
  return true;
}

}  // namespace

ModelDirReader::ModelDirReader(const std::string& dir, bool check_finite)
    : dir_(strip_trailing_slashes(dir)),
      check_finite_(check_finite),
      config_(load_model_config(dir_)),
      layout_(config_) {
  const std::string index_path = dir_ + "/" + kModelIndexFile;
  if (!fs::exists(index_path) && is_hf_checkpoint_dir(dir_))
    fail("'" + dir_ +
         "' is a Hugging Face checkpoint (config.json and its weights), not a zerotrain "
         "model directory: run `zerotrain import " +
         dir_ + " --out MODEL_DIR` and pass MODEL_DIR");
  ZT_CHECK(fs::exists(index_path), "model directory '" + dir_ + "' has no " + kModelIndexFile);
  const nlohmann::json index = read_json_file(index_path);
  try {
    total_size_ = index.at("metadata").at("total_size").get<uint64_t>();
    for (const auto& [name, file] : index.at("weight_map").items())
      weight_map_[name] = file.get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail(index_path +
         ": expected {\"metadata\":{\"total_size\":N},\"weight_map\":{...}}: " + e.what());
  }
  for (const auto& t : layout_.tensors())
    ZT_CHECK(weight_map_.count(t.name),
             "tensor '" + t.name + "' is missing from the index " + index_path);
  std::set<std::string> checked;
  for (const auto& [name, file] : weight_map_) {
    ZT_CHECK(layout_.find(name) >= 0, index_path + " lists tensor '" + name +
                                          "', which is not part of the model of config.json");
    ZT_CHECK(file.find('/') == std::string::npos,
             index_path + ": shard name '" + file + "' must be a plain file name");
    if (checked.insert(file).second)
      ZT_CHECK(fs::exists(dir_ + "/" + file), "shard '" + file + "' (holding tensor '" + name +
                                                  "') listed in " + index_path + " does not exist");
  }
}

const std::string& ModelDirReader::shard_of(const std::string& name) const {
  auto it = weight_map_.find(name);
  ZT_CHECK(it != weight_map_.end(), "model '" + dir_ + "' has no tensor '" + name + "'");
  return it->second;
}

std::vector<std::string> ModelDirReader::shard_files() const {
  std::set<std::string> files;
  for (const auto& [name, file] : weight_map_) files.insert(file);
  return {files.begin(), files.end()};
}

const TensorInfo& ModelDirReader::info(const std::string& name) const {
  const int i = layout_.find(name);
  ZT_CHECK(i >= 0, "model '" + dir_ + "' has no tensor '" + name + "'");
  return layout_.tensors()[static_cast<size_t>(i)];
}

hid_t ModelDirReader::shard_file(const std::string& file) {
  auto it = open_files_.find(file);
  if (it != open_files_.end()) return it->second;
  const std::string path = dir_ + "/" + file;
  h5::require_readable_hdf5(path, "shard");
  return open_files_.emplace(file, h5::open_file(path)).first->second;
}

h5::Id ModelDirReader::open_checked(const std::string& name, DType* stored) {
  const TensorInfo& t = info(name);
  const std::string& file = shard_of(name);
  const hid_t f = shard_file(file);
  const std::string where = "tensor '" + name + "' in shard '" + dir_ + "/" + file + "'";
  ZT_CHECK(h5::has_dataset(f, name), where + " does not exist");
  h5::Id ds = h5::open_dataset(f, name, where);
  const auto shape = h5::dataset_shape(ds, where);
  ZT_CHECK(shape == t.shape, where + " has shape " + h5::shape_string(shape) + ", expected " +
                                 h5::shape_string(t.shape));
  *stored = h5::dataset_dtype(ds, where);
  ZT_CHECK(*stored == DType::kBf16 || *stored == DType::kFloat32,
           where + " has element type " + dtype_name(*stored) + ", expected bfloat16 or float32");
  return ds;
}

DType ModelDirReader::stored_dtype(const std::string& name) {
  DType stored;
  open_checked(name, &stored);
  return stored;
}

void ModelDirReader::read_range(const std::string& name, int64_t begin, int64_t count, DType want,
                                void* out) {
  DType stored;
  h5::Id ds = open_checked(name, &stored);
  const TensorInfo& t = info(name);
  ZT_CHECK(begin >= 0 && count >= 0 && begin + count <= t.numel,
           "tensor '" + name + "': range [" + std::to_string(begin) + ", " +
               std::to_string(begin + count) + ") is outside its " + std::to_string(t.numel) +
               " elements");
  const std::string where = "tensor '" + name + "' in shard '" + dir_ + "/" + shard_of(name) + "'";
  const size_t out_size = dtype_size(want);
  std::vector<uint8_t> staging;
  if (stored != want)
    staging.resize(static_cast<size_t>(std::min(count, kReadChunkElems)) * dtype_size(stored));
  for (int64_t done = 0; done < count; done += kReadChunkElems) {
    const int64_t n = std::min(kReadChunkElems, count - done);
    uint8_t* dest = static_cast<uint8_t*>(out) + static_cast<size_t>(done) * out_size;
    uint8_t* buffer = stored == want ? dest : staging.data();
    for (const auto& box : h5::flat_range_boxes(t.shape, begin + done, n))
      h5::read_box(ds, stored, box.start, box.count,
                   buffer + static_cast<size_t>(box.flat_offset) * dtype_size(stored), where);
    if (stored == DType::kBf16 && want == DType::kFloat32)
      bf16_to_floats(reinterpret_cast<const bf16_t*>(buffer), reinterpret_cast<float*>(dest),
                     static_cast<size_t>(n));
    else if (stored == DType::kFloat32 && want == DType::kBf16)
      floats_to_bf16(reinterpret_cast<const float*>(buffer), reinterpret_cast<bf16_t*>(dest),
                     static_cast<size_t>(n));
    if (!check_finite_) continue;
    int64_t bad = 0;
    const bool ok = want == DType::kFloat32
                        ? all_finite(reinterpret_cast<const float*>(dest), n, &bad)
                        : all_finite(reinterpret_cast<const bf16_t*>(dest), n, &bad);
    ZT_CHECK(ok, where + " contains a non-finite value (NaN or Inf) at element " +
                     std::to_string(begin + done + bad));
  }
}

void ModelDirReader::read_tensor_f32(const std::string& name, float* out) {
  read_range(name, 0, info(name).numel, DType::kFloat32, out);
}

void ModelDirReader::read_tensor_bf16(const std::string& name, bf16_t* out) {
  read_range(name, 0, info(name).numel, DType::kBf16, out);
}

void ModelDirReader::read_tensor_range_f32(const std::string& name, int64_t begin, int64_t count,
                                           float* out) {
  read_range(name, begin, count, DType::kFloat32, out);
}

void ModelDirReader::read_tensor_range_bf16(const std::string& name, int64_t begin, int64_t count,
                                            bf16_t* out) {
  read_range(name, begin, count, DType::kBf16, out);
}

// ---------------------------------------------------------------------------------------------

uint64_t write_model_dir_streaming(const std::string& dir, const ModelConfig& config,
                                   const TensorValuesFn& values, uint64_t shard_limit_bytes,
                                   bool overwrite,
                                   const std::map<std::string, std::string>& files) {
  const ParamLayout layout(config);
  ModelDirWriter writer(dir, config, shard_limit_bytes, overwrite);
  std::vector<float> chunk;
  std::vector<bf16_t> packed;
  uint64_t bytes = 0;
  for (const auto& t : layout.tensors()) {
    const int64_t cols = row_elems(t.shape);
    const int64_t rows_per_chunk =
        std::max<int64_t>(1, kStreamChunkBytes / static_cast<int64_t>(sizeof(float)) / cols);
    writer.begin_tensor(t.name, t.shape, DType::kBf16);
    for (int64_t row = 0; row < t.shape[0]; row += rows_per_chunk) {
      const int64_t rows = std::min(rows_per_chunk, t.shape[0] - row);
      const size_t n = static_cast<size_t>(rows * cols);
      chunk.resize(n);
      packed.resize(n);
      values(t, row * cols, rows * cols, chunk.data());
      floats_to_bf16(chunk.data(), packed.data(), n);
      writer.write_rows(packed.data(), rows);
    }
    writer.end_tensor();
    bytes += static_cast<uint64_t>(t.numel) * sizeof(bf16_t);
  }
  for (const auto& [name, contents] : files) writer.add_file(name, contents);
  writer.finish();
  return bytes;
}

void write_model_dir_from_init(const std::string& dir, const ModelConfig& config, uint64_t seed,
                               uint64_t shard_limit_bytes, bool overwrite) {
  write_model_dir_streaming(
      dir, config,
      [&](const TensorInfo& t, int64_t begin, int64_t count, float* out) {
        init_tensor_range(config, t, seed, begin, count, out);
      },
      shard_limit_bytes, overwrite);
}

}  // namespace zt

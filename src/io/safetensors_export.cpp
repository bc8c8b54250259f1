#include "io/safetensors_export.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "io/tokenizer_files.h"
#include "model/hf_checkpoint_tensors.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kExportChunkElems = int64_t{4} << 20;

}  // namespace

namespace {

// Streams the tensors of one output file from the model directory: each the rows of its parts
// (`stored`, the checkpoint's tensors by name) one after another.
void write_safetensors_shard(ModelDirReader& model, const std::string& path,
                             std::vector<SafetensorsEntry> tensors,
                             const std::map<std::string, const HfCheckpointTensor*>& stored) {
  SafetensorsFileWriter writer(path, std::move(tensors));
  std::vector<uint8_t> buffer;
  for (const SafetensorsEntry& t : writer.tensors()) {
    const size_t size = safetensors_dtype_size(t.dtype);
    for (int index : stored.at(t.name)->parts) {
      const TensorInfo& part = model.layout().tensors()[static_cast<size_t>(index)];
      for (int64_t done = 0; done < part.numel; done += kExportChunkElems) {
        const int64_t n = std::min(kExportChunkElems, part.numel - done);
        buffer.resize(static_cast<size_t>(n) * size);
        if (t.dtype == "BF16")
          model.read_tensor_range_bf16(part.name, done, n,
                                       reinterpret_cast<bf16_t*>(buffer.data()));
        else
          model.read_tensor_range_f32(part.name, done, n, reinterpret_cast<float*>(buffer.data()));
        writer.append(buffer.data(), buffer.size());
      }
    }
  }
  writer.finish();
}

}  // namespace

SafetensorsExport export_safetensors(const std::string& model_dir, const std::string& out_dir,
                                     uint64_t max_shard_bytes, bool overwrite) {
  const Stopwatch clock;
  ZT_CHECK(max_shard_bytes > 0, "export: the shard size limit must be positive");
  ModelDirReader model(model_dir);
  SafetensorsExport result;
  result.dir = strip_trailing_slashes(out_dir);
  check_output_dir_writable(result.dir, overwrite);

  // Written as the family's checkpoint stores them (Phi-3's projections joined).
  std::vector<SafetensorsEntry> all;
  std::vector<uint64_t> bytes;
  const std::vector<HfCheckpointTensor> checkpoint = hf_checkpoint_tensors(model.layout());
  std::map<std::string, const HfCheckpointTensor*> stored;
  const std::vector<TensorInfo>& layout_tensors = model.layout().tensors();
  for (const HfCheckpointTensor& t : checkpoint) {
    stored[t.name] = &t;
    SafetensorsEntry e;
    e.name = t.name;
    e.shape = t.shape;
    for (int part : t.parts) {
      const std::string& part_name = layout_tensors[static_cast<size_t>(part)].name;
      const std::string dtype = safetensors_dtype_of(model.stored_dtype(part_name));
      ZT_CHECK(e.dtype.empty() || e.dtype == dtype,
               "export: '" + model_dir + "': the parts of '" + t.name +
                   "' are stored in different types (" + e.dtype + ", " + dtype + ")");
      e.dtype = dtype;
    }
    bytes.push_back(safetensors_numel(t.shape) * safetensors_dtype_size(e.dtype));
    result.bytes += bytes.back();
    all.push_back(std::move(e));
  }
  const std::vector<int> shard_of = plan_shards(bytes, max_shard_bytes);
  const int num_shards = shard_of.empty() ? 1 : shard_of.back();

  check_room_to_write(dir_parent(result.dir), result.bytes, "model '" + result.dir + "'");
  const std::string tmp = temp_sibling(result.dir);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!dir_parent(result.dir).empty()) fs::create_directories(dir_parent(result.dir), ec);
  fs::create_directory(tmp, ec);
  ZT_CHECK(!ec, "cannot create temporary directory '" + tmp + "': " + errno_text(ec.value()));
  try {
    std::map<std::string, std::string> weight_map;
    for (int s = 1; s <= num_shards; ++s) {
      const std::string file =
          num_shards == 1 ? kSafetensorsFile : model_shard_file_name(s, num_shards, "safetensors");
      std::vector<SafetensorsEntry> tensors;
      for (size_t i = 0; i < all.size(); ++i)
        if (shard_of[i] == s) {
          tensors.push_back(all[i]);
          weight_map[all[i].name] = file;
        }
      write_safetensors_shard(model, tmp + "/" + file, std::move(tensors), stored);
      result.files.push_back(file);
    }
    if (num_shards > 1)
      write_weight_index_file(tmp + "/" + kSafetensorsIndexFile, weight_map, result.bytes);
    // The model's tokenizer files, read from the model directory, appear with the export, and
    // config.json carries generation_config.json's bos/eos ids.
    const auto tokenizer_files = tokenizer_files_to_write(read_tokenizer_files(model_dir));
    for (const auto& [name, text] : tokenizer_files) {
      write_tokenizer_file(tmp, name, text);
      result.tokenizer_files.push_back(name);
    }
    nlohmann::json config = model.config().to_transformers_json();
    config.update(generation_token_ids(tokenizer_files, model_dir));
    write_text_file(tmp + "/" + kModelConfigFile, config.dump(2) + "\n");
    fsync_path(tmp);
    move_into_place(tmp, result.dir, overwrite);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  result.seconds = clock.seconds();
  return result;
}

}  // namespace zt

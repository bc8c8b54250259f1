#include "io/weight_file.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/sha256.h"

namespace zt {

namespace fs = std::filesystem;

WeightFile::WeightFile(const std::string& path) : path_(path) {
  if (!path.ends_with(".safetensors")) {
    torch_ = std::make_unique<TorchCheckpointReader>(path);
    for (const TorchTensor& t : torch_->tensors()) tensors_.push_back({t.name, t.dtype, t.shape});
  } else {
    safetensors_ = std::make_unique<SafetensorsReader>(path);
    for (const SafetensorsEntry& e : safetensors_->tensors())
      tensors_.push_back({e.name, e.dtype, e.shape});
  }
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

const StoredTensor& WeightFile::tensor(const std::string& name) const {
  const auto it = by_name_.find(name);
  ZT_CHECK(it != by_name_.end(), "'" + path_ + "' has no tensor '" + name + "'");
  return tensors_[it->second];
}

void WeightFile::read_range_f32(const std::string& name, int64_t begin, int64_t count,
                                float* out) const {
  if (safetensors_)
    safetensors_->read_range_f32(name, begin, count, out);
  else
    torch_->read_range_f32(name, begin, count, out);
}

TensorValues read_tensor_values(const WeightFile& file, const std::string& name) {
  static_assert(std::endian::native == std::endian::little, "the digest hashes fp32 as held");
  const StoredTensor& t = file.tensor(name);
  ZT_CHECK(is_readable_weight_dtype(t.dtype), "'" + file.path() + "': tensor '" + name + "' is " +
                                                  t.dtype + "; its values are read in " +
                                                  kReadableWeightDtypes);
  const auto numel = static_cast<int64_t>(safetensors_numel(t.shape));
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<float> values(static_cast<size_t>(std::min(numel, kChunk)));
  Sha256 sha;
  TensorValues result;
  for (int64_t begin = 0; begin < numel; begin += kChunk) {
    const int64_t n = std::min(kChunk, numel - begin);
    file.read_range_f32(name, begin, n, values.data());
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(values[static_cast<size_t>(i)]) && result.non_finite++ == 0)
        result.first_non_finite = begin + i;
    sha.update(values.data(), static_cast<size_t>(n) * sizeof(float));
  }
  result.sha256 = sha.hex_digest();
  return result;
}

bool check_importable_tensor(const WeightFile& file, const std::string& name,
                             const std::vector<int64_t>& shape, const std::string& shape_source) {
  const StoredTensor& stored = file.tensor(name);
  ZT_CHECK(stored.dtype == "BF16" || stored.dtype == "F16" || stored.dtype == "F32",
           "import: '" + file.path() + "': tensor '" + name + "' is " + stored.dtype +
               "; zerotrain reads BF16, F16 or F32 weights");
  ZT_CHECK(stored.shape == shape, "import: '" + file.path() + "': tensor '" + name +
                                      "' has shape " + nlohmann::json(stored.shape).dump() + ", " +
                                      shape_source + " gives " + nlohmann::json(shape).dump());
  return stored.dtype != "BF16";
}

std::string tied_head_note(const WeightFile& head, const std::string& head_name,
                           const WeightFile& embedding, const std::string& embedding_name,
                           const std::vector<int64_t>& shape) {
  const StoredTensor& stored = head.tensor(head_name);
  ZT_CHECK(stored.shape == shape, "import: '" + head.path() + "': tensor '" + head_name +
                                      "' has shape " + nlohmann::json(stored.shape).dump() +
                                      ", the tied embedding " + nlohmann::json(shape).dump());
  const int64_t numel = shape[0] * shape[1];
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<float> a(static_cast<size_t>(std::min(numel, kChunk))), b(a.size());
  for (int64_t begin = 0; begin < numel; begin += kChunk) {
    const int64_t n = std::min(kChunk, numel - begin);
    head.read_range_f32(head_name, begin, n, a.data());
    embedding.read_range_f32(embedding_name, begin, n, b.data());
    for (int64_t i = 0; i < n; ++i)
      if (round_to_bf16(a[static_cast<size_t>(i)]) != round_to_bf16(b[static_cast<size_t>(i)]))
        return head_name + " (tie_word_embeddings: differs from the embedding at element " +
               std::to_string(begin + i) + "; transformers also uses the embedding)";
  }
  return head_name + " (tie_word_embeddings: the same values as the embedding)";
}

namespace {

std::map<std::string, std::string> index_weight_map(const std::string& index) {
  const nlohmann::json j = read_json_file(index);
  ZT_CHECK(j.contains("weight_map") && j.at("weight_map").is_object(),
           index + ": expected {\"weight_map\": {TENSOR: FILE, ...}}");
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : j.at("weight_map").items()) {
    ZT_CHECK(file.is_string(),
             index + ": weight_map['" + name + "'] must be a file name, got " + quoted_json(file));
    map[name] = file.get<std::string>();
  }
  return map;
}

}  // namespace

HfWeights open_hf_weights(const std::string& dir) {
  std::error_code ec;
  HfWeights w;
  for (const auto& [single, index] : {std::pair{kSafetensorsFile, kSafetensorsIndexFile},
                                      std::pair{kPytorchFile, kPytorchIndexFile}}) {
    const bool has_index = fs::exists(fs::path(dir) / index, ec);
    if (fs::exists(fs::path(dir) / single, ec)) {
      w.index_ignored = has_index;
      auto& file = w.files[single];
      file = std::make_unique<WeightFile>((fs::path(dir) / single).string());
      for (const StoredTensor& t : file->tensors()) w.weight_map[t.name] = single;
      return w;
    }
    if (!has_index) continue;
    w.weight_map = index_weight_map((fs::path(dir) / index).string());
    for (const auto& [name, file] : w.weight_map) {
      ZT_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
               "'" + dir + "': tensor '" + name + "' is mapped to '" + file +
                   "', not a file name inside the directory");
      auto& open = w.files[file];
      if (!open) open = std::make_unique<WeightFile>((fs::path(dir) / file).string());
    }
    return w;
  }
  fail("'" + dir + "' has none of " + kSafetensorsFile + ", " + kSafetensorsIndexFile + ", " +
       kPytorchFile + " or " + kPytorchIndexFile);
}

bool is_hf_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(dir) / "config.json", ec)) return false;
  for (const char* file :
       {kSafetensorsFile, kSafetensorsIndexFile, kPytorchFile, kPytorchIndexFile})
    if (fs::is_regular_file(fs::path(dir) / file, ec)) return true;
  return false;
}

}  // namespace zt

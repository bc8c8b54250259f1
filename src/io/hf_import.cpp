#include "io/hf_import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "io/model_dir.h"
#include "io/tokenizer_files.h"
#include "io/weight_file.h"
#include "model/hf_checkpoint_tensors.h"
#include "model/hf_multimodal_config.h"
#include "model/layout.h"
#include "util/bf16.h"
#include "util/error.h"

namespace zt {
namespace fs = std::filesystem;

namespace {

// Stored tensors of an HF checkpoint that are not parameters: older Llama checkpoints keep RoPE's
// inverse frequencies as a buffer, which zerotrain recomputes from rope_theta.
bool is_ignored_buffer(const std::string& name) {
  const std::string suffix = "rotary_emb.inv_freq";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Where a multimodal checkpoint keeps the text model's tensors (Gemma 3's and Mistral 3's:
// transformers 4.50 wrote language_model.model.* and language_model.lm_head.weight, 4.52 and later
// model.language_model.* and lm_head.weight), as a map from the text model's names; and whether a
// stored tensor belongs to the vision tower or its projector, which the text model leaves out.
struct CheckpointNaming {
  std::string model_prefix;  // replaces "model."
  std::string head_name = "lm_head.weight";
  std::string stored(const std::string& name) const {
    if (model_prefix.empty()) return name;
    if (name == "lm_head.weight") return head_name;
    return model_prefix + name.substr(std::string("model.").size());
  }
  bool is_vision(const std::string& name) const {
    if (model_prefix.empty()) return false;
    for (const char* part : {"vision_tower.", "multi_modal_projector."})
      if (name.rfind(part, 0) == 0 || name.rfind(std::string("model.") + part, 0) == 0) return true;
    return false;
  }
};

CheckpointNaming checkpoint_naming(const MultimodalWrapper* multimodal,
                                   const std::map<std::string, std::string>& map,
                                   const std::string& hf_dir) {
  CheckpointNaming naming;
  if (!multimodal) return naming;
  if (map.count("language_model.model.embed_tokens.weight")) {
    naming.model_prefix = "language_model.model.";
    naming.head_name = "language_model.lm_head.weight";
  } else {
    ZT_CHECK(map.count("model.language_model.embed_tokens.weight"),
             "import: '" + hf_dir + "' is a " + multimodal->name +
                 " multimodal checkpoint without its text model's embedding "
                 "(language_model.model.embed_tokens.weight or "
                 "model.language_model.embed_tokens.weight)");
    naming.model_prefix = "model.language_model.";
  }
  return naming;
}

using Readers = std::map<std::string, std::unique_ptr<WeightFile>>;

// Every tensor of the model is in the checkpoint, readable and of its shape; every other stored
// tensor is one the model may leave out (buffers, a tied head, a multimodal checkpoint's vision
// tower), recorded in result.ignored_tensors. Counts the tensors rounded to bf16.
void check_checkpoint_tensors(const ParamLayout& layout, const CheckpointNaming& naming,
                              const std::map<std::string, std::string>& weight_map,
                              const Readers& readers, const std::string& hf_dir,
                              const std::string& config_path, HfImportResult& result) {
  std::set<std::string> expected;
  for (const HfCheckpointTensor& t : hf_checkpoint_tensors(layout)) {
    const std::string name = naming.stored(t.name);
    expected.insert(name);
    const auto where = weight_map.find(name);
    ZT_CHECK(where != weight_map.end(), "import: '" + hf_dir + "' has no tensor '" + name +
                                            "', which the model of " + config_path + " needs");
    if (check_importable_tensor(*readers.at(where->second), name, t.shape, config_path))
      ++result.rounded_tensors;
  }
  int64_t vision_tensors = 0;
  for (const auto& [name, file] : weight_map) {
    if (expected.count(name)) continue;
    if (name == naming.head_name && result.config.tie_word_embeddings) {
      const TensorInfo& embedding = layout.tensor(TensorRole::kEmbedding);
      const std::string embedding_name = naming.stored(embedding.name);
      result.ignored_tensors.push_back(tied_head_note(*readers.at(file), name,
                                                      *readers.at(weight_map.at(embedding_name)),
                                                      embedding_name, embedding.shape));
      continue;
    }
    if (naming.is_vision(name)) {
      ++vision_tensors;
      continue;
    }
    ZT_CHECK(is_ignored_buffer(name), "import: '" + (fs::path(hf_dir) / file).string() +
                                          "' has tensor '" + name + "', which the model of " +
                                          config_path + " does not have");
    result.ignored_tensors.push_back(name);
  }

  if (vision_tensors > 0)
    result.ignored_tensors.push_back(std::to_string(vision_tensors) +
                                     " tensors of the vision tower and its projector");
}

}  // namespace

HfImportResult import_hf_model(const std::string& hf_dir, const std::string& out_dir,
                               uint64_t shard_limit_bytes, bool overwrite,
                               UnknownConfigKeys unknown) {
  std::error_code ec;
  ZT_CHECK(fs::is_directory(hf_dir, ec), "import: '" + hf_dir + "' is not a directory");
  const std::string config_path = (fs::path(hf_dir) / "config.json").string();
  const nlohmann::json file_json = read_json_file(config_path);
  // A multimodal checkpoint (Gemma 3's, Mistral Small 3's): its text model (docs/models.md).
  const MultimodalWrapper* multimodal = multimodal_wrapper(file_json);
  const nlohmann::json config_json =
      multimodal ? multimodal_text_config(file_json, *multimodal, config_path) : file_json;
  HfImportResult result;
  result.config = ModelConfig::from_hf_json(config_json, config_path, unknown);
  result.ignored_keys = hf_config_ignored_keys(config_json);
  result.unknown_keys = hf_config_unknown_keys(config_json);
  if (multimodal) {  // the text model's keys named as text_config's, the file's own beside them
    auto in_text_config = [](std::vector<std::string> keys) {
      std::vector<std::string> named;
      for (const std::string& key : keys)
        if (key != "model_type" && key != "architectures") named.push_back("text_config." + key);
      return named;
    };
    result.ignored_keys = multimodal_keys(file_json);
    for (const std::string& key : in_text_config(hf_config_ignored_keys(config_json)))
      result.ignored_keys.push_back(key);
    result.unknown_keys = in_text_config(result.unknown_keys);
  }
  for (const std::string& key : result.unknown_keys)
    result.unknown_key_hints.push_back(hf_config_key_hint(key, config_json));
  const ParamLayout layout(result.config);

  // Where each tensor is, every file's header read and checked once.
  HfWeights weights = open_hf_weights(hf_dir);
  const std::map<std::string, std::string>& weight_map = weights.weight_map;
  const Readers& readers = weights.files;
  result.index_ignored = weights.index_ignored;
  const CheckpointNaming naming = checkpoint_naming(multimodal, weight_map, hf_dir);
  for (const auto& [name, file] : weight_map) {  // in the order the tensors name them
    const WeightFile& reader = *readers.at(file);
    if (std::find(result.source_files.begin(), result.source_files.end(), reader.path()) ==
        result.source_files.end())
      result.source_files.push_back(reader.path());
    result.weights_format = reader.format();
  }
  // Every tensor a shard holds must be one the index maps to that shard.
  for (const auto& [file, reader] : readers) {
    for (const StoredTensor& t : reader->tensors()) {
      const auto mapped = weight_map.find(t.name);
      ZT_CHECK(mapped != weight_map.end() && mapped->second == file,
               "import: '" + reader->path() + "' holds tensor '" + t.name +
                   "', which the index does not map to it");
    }
  }
  check_checkpoint_tensors(layout, naming, weight_map, readers, hf_dir, config_path, result);

  // The tokenizer files and the record appear with the model, all read before anything is written.
  std::map<std::string, std::string> files = tokenizer_files_to_write(read_tokenizer_files(hf_dir));
  for (const auto& [name, text] : files) result.tokenizer_files.push_back(name);
  files[kImportRecordFile] = nlohmann::json{{"hf_dir", fs::absolute(hf_dir).string()},
                                            {"source_files", result.source_files},
                                            {"ignored_config_keys", result.ignored_keys},
                                            {"unknown_config_keys", result.unknown_keys},
                                            {"ignored_tensors", result.ignored_tensors},
                                            {"rounded_tensors", result.rounded_tensors},
                                            {"index_ignored", result.index_ignored},
                                            {"tokenizer_files", result.tokenizer_files}}
                                 .dump(2) +
                             "\n";
  // A layout tensor is read from its place in the checkpoint (Phi-3's fused tensors hold several).
  const std::map<std::string, HfCheckpointPlace> places = hf_checkpoint_places_by_name(layout);
  result.bytes_written = write_model_dir_streaming(
      out_dir, result.config,
      [&](const TensorInfo& t, int64_t begin, int64_t count, float* out) {
        const HfCheckpointPlace& place = places.at(t.name);
        const std::string name = naming.stored(place.name);
        const WeightFile& reader = *readers.at(weight_map.at(name));
        const int64_t first = place.element_offset + begin;
        reader.read_range_f32(name, first, count, out);
        // Checked as stored in bf16: an F32 value beyond bf16's range would round to infinity.
        for (int64_t i = 0; i < count; ++i) {
          ZT_CHECK(std::isfinite(round_to_bf16(out[i])),
                   "import: '" + reader.path() + "': tensor '" + name +
                       "' holds a value that is not finite in bf16 at element " +
                       std::to_string(first + i) + " (" + std::to_string(out[i]) + ")");
        }
      },
      shard_limit_bytes, overwrite, files);
  return result;
}

}  // namespace zt

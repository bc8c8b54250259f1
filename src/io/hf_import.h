// zerotrain import: a Hugging Face checkpoint directory (config.json + model.safetensors, or
// shards listed by model.safetensors.index.json; or, without them, PyTorch's pytorch_model.bin or
// its index's shards, io/weight_file.h; BF16, F16 or F32 tensors) into a zerotrain model
// directory (io/model_dir.h: bf16 HDF5 shards). The config goes through ModelConfig::from_hf_json,
// which refuses every key that would change the model away from what zerotrain computes
// (and, with UnknownConfigKeys::kRefuse, every key it does not know).
// Everything is checked before a byte is written: each tensor of the layout present once, with
// the layout's shape and a readable dtype, and no tensor left over. The tensors then stream one
// bounded chunk at a time (write_model_dir_streaming), so a 7B/8B checkpoint needs no more memory
// than a chunk; a non-finite value is an error naming the tensor. The output directory, with the
// tokenizer files of the Hugging Face directory and import.json, appears only when complete (the
// writer builds it beside and renames it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace zt {

// The record `import` leaves in the model directory (JSON: the Hugging Face directory, the files
// read, the config keys and stored tensors read past); train copies it into run.json.
constexpr const char* kImportRecordFile = "import.json";

struct HfImportResult {
  ModelConfig config;
  std::vector<std::string> source_files;  // weight files read
  std::string weights_format;             // "safetensors" or "PyTorch" (WeightFile::format)
  std::vector<std::string> ignored_keys;  // config.json keys read past (hf_config_ignored_keys)
  std::vector<std::string> unknown_keys;  // ... and those it does not know (hf_config_unknown_keys)
  std::vector<std::string> unknown_key_hints;  // each one's hf_config_key_hint ("" for none)
  // Stored tensors that are not parameters: buffers (inv_freq), a tied model's lm_head copy.
  std::vector<std::string> ignored_tensors;
  std::vector<std::string> tokenizer_files;  // copied beside the model (io/tokenizer_files.h)
  // model.safetensors (pytorch_model.bin) was read and an index beside it was not, as
  // transformers does.
  bool index_ignored = false;
  uint64_t bytes_written = 0;
  int64_t rounded_tensors = 0;  // F16/F32 tensors rounded to bf16
};

HfImportResult import_hf_model(const std::string& hf_dir, const std::string& out_dir,
                               uint64_t shard_limit_bytes, bool overwrite,
                               UnknownConfigKeys unknown = UnknownConfigKeys::kAccept);

}  // namespace zt

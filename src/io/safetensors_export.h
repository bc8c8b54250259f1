// `zerotrain export --format safetensors`: a model directory streamed into a Hugging Face
// directory of safetensors files (the format is io/safetensors.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

struct SafetensorsExport {
  std::string dir;
  std::vector<std::string> files;            // safetensors files written
  std::vector<std::string> tokenizer_files;  // the model directory's, written beside them
  uint64_t bytes = 0;                        // tensor bytes
  double seconds = 0;
};

// Streams a model directory, tensor by tensor in bounded chunks, into `out_dir` as safetensors
// (each tensor in its stored dtype, bf16 or fp32) plus config.json and the model's tokenizer
// files; shards past
// max_shard_bytes. Written into a temporary sibling and moved into place.
SafetensorsExport export_safetensors(const std::string& model_dir, const std::string& out_dir,
                                     uint64_t max_shard_bytes, bool overwrite);

}  // namespace zt

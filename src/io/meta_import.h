// zerotrain import of a Llama checkpoint in Meta's own layout (docs/models.md "Meta's
// original checkpoints"): the directory Meta's download script and the Hub's original/ folder
// hold, params.json beside consolidated.00.pth, the state dict torch.save wrote of Meta's
// reference Transformer (tok_embeddings, layers.N.attention.wq ..., output). It is imported as
// transformers' convert_llama_weights_to_hf.py converts it, which fixes what params.json leaves
// out by the Llama version it is told (--llama_version, here --llama-version): the context
// length, Llama 3.1's and 3.2's RoPE scaling (factor 8 or 32), Llama 3.2's tied head. Meta's
// wq and wk rotate adjacent pairs; their rows are read in Hugging Face's rotate-half order, as
// the converter permutes them. The model-parallel shards of a 13B or 70B model
// (consolidated.00.pth, consolidated.01.pth, ...) are joined as the converter joins them. The
// tokenizer (Meta's tokenizer.model) is not converted: --tokenizer copies a Hugging Face
// directory's files. Everything is checked before a byte is written, and the directory appears
// only when complete (io/model_dir.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace zt {

inline constexpr const char* kMetaParamsFile = "params.json";
inline constexpr const char* kMetaWeightsFile = "consolidated.00.pth";
// The versions transformers' converter takes, which --llama-version names.
inline const std::vector<std::string> kMetaLlamaVersions = {"1", "2", "3", "3.1", "3.2", "Guard-3"};

// Whether `dir` holds params.json and consolidated.00.pth (and no config.json: a Hugging Face
// directory that also keeps Meta's files is read as Hugging Face's).
bool is_meta_checkpoint_dir(const std::string& dir);

// The Hugging Face config.json transformers' converter writes for `params_json` (params.json, named
// `source` in errors) at `llama_version`; `stored_vocab` (tok_embeddings' rows) stands in for a
// vocab_size of -1, as Llama 1 and 2 give it. Keys of params.json are read (dim, n_layers,
// n_heads, n_kv_heads, vocab_size, multiple_of, ffn_dim_multiplier, norm_eps, rope_theta,
// use_scaled_rope), read past (max_batch_size, max_seq_len: Meta's inference sizes), refused
// (quantization, LoRA and vision settings), or unknown, which are returned in `unknown_keys`.
nlohmann::json meta_hf_config(const nlohmann::json& params_json, const std::string& llama_version,
                              int64_t stored_vocab, const std::string& source,
                              std::vector<std::string>& unknown_keys);

struct MetaImportResult {
  ModelConfig config;
  std::vector<std::string> weights_files;    // consolidated.00.pth and any model-parallel shards
  std::vector<std::string> unknown_keys;     // params.json keys zerotrain does not know
  std::vector<std::string> ignored_tensors;  // rope.freqs, a tied model's output.weight
  std::vector<std::string> tokenizer_files;  // copied from --tokenizer
  uint64_t bytes_written = 0;
  int64_t rounded_tensors = 0;  // F16/F32 tensors rounded to bf16
};

// `tokenizer_dir`: a Hugging Face directory whose tokenizer files to copy ("" for none).
MetaImportResult import_meta_model(const std::string& meta_dir, const std::string& out_dir,
                                   uint64_t shard_limit_bytes, bool overwrite,
                                   const std::string& llama_version,
                                   const std::string& tokenizer_dir,
                                   UnknownConfigKeys unknown = UnknownConfigKeys::kAccept);

}  // namespace zt

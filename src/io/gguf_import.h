// zerotrain import FILE.gguf: a llama.cpp GGUF file into a zerotrain model directory.
//
// The model's shape comes from the architecture's metadata (general.architecture llama, qwen2 or
// qwen3: block_count, embedding_length, feed_forward_length, attention.head_count(_kv),
// attention.key_length, rope.freq_base, rope.scaling, attention.layer_norm_rms_epsilon,
// context_length), the tensors from their GGUF names (token_embd, blk.N.attn_q, ...; no
// output.weight means tied embeddings), dequantized to fp32 (io/gguf_quants.h) and rounded once to
// bf16. llama.cpp's Hugging Face converter permutes the rows of a llama q and k projection so
// that RoPE rotates adjacent pairs; the import puts them back in Hugging Face's rotate-half order.
// The tokenizer is rebuilt from the vocabulary (io/gguf_tokenizer.h), or copied from a Hugging
// Face directory. Everything is checked before a byte is written, and the directory (with its
// tokenizer files and import.json) appears only when complete.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/gguf_file.h"
#include "model/config.h"

namespace zt {

// Whether `path` is a file that starts with GGUF's magic.
bool is_gguf_file(const std::string& path);

// The model configuration a GGUF file describes (its metadata and which tensors it holds).
ModelConfig gguf_model_config(const GgufReader& gguf);

// The GGUF name of a Hugging Face tensor name ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"), and whether llama.cpp permutes its rows for an architecture.
// sandwich_norms: a Gemma 2's, Gemma 3's or OLMo 2's, whose post_attention_layernorm is llama.cpp's
// post_attention_norm (gguf_post_attention_norm_follows_attention; GLM-4's norm of the attention's
// output is its post_self_attn_layernorm).
std::string gguf_tensor_name(const std::string& hf_name, bool sandwich_norms = false);
bool gguf_post_attention_norm_follows_attention(const ModelConfig& c);
// The query_pre_attn_scalar llama.cpp's gemma2 and gemma3 scale the scores by (the file carries
// none): hidden / heads for the 27B models (Gemma-2's 46 layers, Gemma-3's 62), else head_dim.
double llama_cpp_gemma_query_scalar(const ModelConfig& c);
// What llama.cpp's gemma3 fixes for every file: every sixth layer attends over every key, the
// others rotate with a base of 10000.
constexpr int64_t kLlamaCppGemma3Pattern = 6;
constexpr double kLlamaCppGemma3LocalRopeBase = 10000.0;
bool gguf_permutes_rows(const std::string& architecture, const std::string& hf_name);
// The row of a permuted [heads·head_dim, in] projection where Hugging Face's row `row` is stored:
// within each head, the first and second halves are interleaved.
int64_t gguf_permuted_row(int64_t row, int64_t head_dim);
// What llama.cpp's file holds for a norm weight w of a Gemma (Hugging Face's `...norm.weight`):
// 1 + w, as its converter writes it (llama.cpp's gemma multiplies by the stored value); the
// offset to add on export and take away on import, 0 for other tensors and architectures.
float gguf_stored_norm_offset(const std::string& architecture, const std::string& hf_name);

// The tensor llama.cpp stores llama3 rope scaling in (model/rope_freq_factors.h).
inline constexpr const char* kRopeFreqsTensor = "rope_freqs.weight";
// llama.cpp's smollm3: every this-many-th layer takes no RoPE (its n_no_rope_layer_step).
inline constexpr int64_t kSmolLM3NoRopeStep = 4;
// Phi-3's longrope factors as llama.cpp's converter writes them (fp32, one per frequency).
inline constexpr const char* kRopeFactorsShortTensor = "rope_factors_short.weight";
inline constexpr const char* kRopeFactorsLongTensor = "rope_factors_long.weight";

struct GgufImportResult {
  ModelConfig config;
  std::string architecture;
  std::map<std::string, int64_t> tensor_types;  // ggml type name -> tensors of it
  std::vector<std::string> tokenizer_files;
  std::string tokenizer_source;  // "the GGUF vocabulary" or the directory copied from
  uint64_t bytes_written = 0;
};

// `tokenizer_dir`: a Hugging Face directory to take the tokenizer files from instead of
// rebuilding them from the file's vocabulary ("" to rebuild).
GgufImportResult import_gguf_model(const std::string& gguf_path, const std::string& out_dir,
                                   uint64_t shard_limit_bytes, bool overwrite,
                                   const std::string& tokenizer_dir);

}  // namespace zt

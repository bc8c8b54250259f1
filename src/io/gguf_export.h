// zerotrain export --format gguf: a model directory as one llama.cpp GGUF file, so that a
// fine-tuned model runs in llama.cpp or Ollama. The metadata is the architecture's (llama for
// Llama and Mistral, qwen2, qwen3) with the shape, RoPE base and norm epsilon; the tensors take
// their GGUF names, llama's q and k rows permuted as llama.cpp's converter permutes them
// (io/gguf_import.h undoes it); 1-D tensors (norms, biases) are F32, the matrices F32, F16, BF16
// or Q8_0 (a matrix whose rows are not whole Q8_0 blocks falls back to F16, as llama.cpp's
// converter does). The tokenizer files beside the model become tokenizer.ggml.* and
// tokenizer.chat_template (io/gguf_tokenizer.h). An F32 or BF16 file imports back bit for bit.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace zt {

enum class GgufOutType { kF32, kF16, kBF16, kQ8_0 };

// "f32", "f16", "bf16", "q8_0" (as llama.cpp's convert_hf_to_gguf.py --outtype spells them).
GgufOutType parse_gguf_out_type(const std::string& name);

struct GgufExport {
  std::string path;
  uint64_t bytes = 0;                           // the file's size
  std::map<std::string, int64_t> tensor_types;  // ggml type name -> tensors of it
  double seconds = 0;
  // > 0: the model's sliding window, written to the file but not applied by llama.cpp's llama
  // architecture, which attends over the whole context past it (as for its own Mistral files).
  int64_t sliding_window_ignored = 0;
};

// The model's name for the file's general.name when export is not given one (--gguf-name): the
// name the GGUF file it was imported from had (its import.json), else the directory's name, or
// for a train run's final/ (run.json beside it) the run directory's. llama.cpp and Ollama list a
// model by it.
std::string gguf_model_name(const std::string& model_dir);

// Writes `out_path` (refused when it exists, unless overwrite); the file appears only when whole.
// `name`: general.name.
GgufExport export_gguf(const std::string& model_dir, const std::string& out_path, GgufOutType type,
                       bool overwrite, const std::string& name);

}  // namespace zt

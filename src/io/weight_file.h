// The weights a Hugging Face tool wrote, in either of its formats (docs/models.md "PyTorch
// checkpoints"): safetensors (safetensors.h) or a PyTorch checkpoint (torch_checkpoint.h, what
// save_pretrained(safe_serialization=False) writes: pytorch_model.bin, adapter_model.bin). As
// transformers and PEFT tell them, by name: a .safetensors file is safetensors, any other a
// PyTorch file. What import, PEFT adapters and info read.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/torch_checkpoint.h"

namespace zt {

constexpr const char* kPytorchFile = "pytorch_model.bin";
constexpr const char* kPytorchIndexFile = "pytorch_model.bin.index.json";

struct StoredTensor {
  std::string name;
  std::string dtype;  // a safetensors dtype name
  std::vector<int64_t> shape;
};

class WeightFile {
 public:
  explicit WeightFile(const std::string& path);

  const std::string& path() const { return path_; }
  // "safetensors" or "PyTorch"
  const char* format() const { return safetensors_ ? "safetensors" : "PyTorch"; }
  const std::vector<StoredTensor>& tensors() const { return tensors_; }  // the file's order
  const StoredTensor& tensor(const std::string& name) const;
  bool has(const std::string& name) const { return by_name_.count(name) > 0; }
  // SafetensorsReader::read_range_f32's contract, for either format.
  void read_range_f32(const std::string& name, int64_t begin, int64_t count, float* out) const;

 private:
  std::string path_;
  std::unique_ptr<SafetensorsReader> safetensors_;
  std::unique_ptr<TorchCheckpointReader> torch_;
  std::vector<StoredTensor> tensors_;
  std::map<std::string, size_t> by_name_;
};

// What reading every value of a stored tensor found (info --verify): the SHA-256 of its values as
// little-endian fp32 in row-major order (an F64 tensor's rounded to fp32 first), which is what
// hashlib gives for torch's t.float().contiguous().numpy().tobytes(); and how many values are not
// finite, the first at element first_non_finite (-1: none).
struct TensorValues {
  std::string sha256;
  int64_t non_finite = 0;
  int64_t first_non_finite = -1;
};
// Reads the tensor `name` of `file` in bounded chunks; a dtype read_range_f32 does not read
// (is_readable_weight_dtype) is refused naming the file and the tensor.
TensorValues read_tensor_values(const WeightFile& file, const std::string& name);

// A stored tensor an import reads: BF16, F16 or F32, of the shape `shape` (what `shape_source`,
// a config file, gives), else refused naming the file and the tensor. Returns whether its values
// are rounded to bf16 (F16, F32).
bool check_importable_tensor(const WeightFile& file, const std::string& name,
                             const std::vector<int64_t>& shape, const std::string& shape_source);

// A tied model whose file stores its head anyway (Hugging Face's lm_head.weight, Meta's
// output.weight): transformers ties it to the embedding on load, and so does zerotrain; the stored
// copy is compared (as bf16 values, in bounded chunks) only to say whether it was the same.
// Returns the note for the list of tensors read past; a shape other than the embedding's
// (`shape`) is refused naming the file.
std::string tied_head_note(const WeightFile& head, const std::string& head_name,
                           const WeightFile& embedding, const std::string& embedding_name,
                           const std::vector<int64_t>& shape);

// A Hugging Face directory's weights, as transformers' from_pretrained chooses them:
// model.safetensors, else model.safetensors.index.json's map, else pytorch_model.bin, else
// pytorch_model.bin.index.json's map. Every file is opened once (its header or pickle read and
// checked); a map entry that is not a file name inside the directory is refused naming the
// tensor.
struct HfWeights {
  std::map<std::string, std::string> weight_map;             // tensor name -> file name
  std::map<std::string, std::unique_ptr<WeightFile>> files;  // file name -> the open file
  bool index_ignored = false;  // a single file was read while its index sat beside it
};
HfWeights open_hf_weights(const std::string& dir);

// Whether `dir` looks like a Hugging Face checkpoint (config.json and weights in either format).
bool is_hf_checkpoint_dir(const std::string& dir);

}  // namespace zt

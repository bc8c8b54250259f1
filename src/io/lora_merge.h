// Merging a PEFT LoRA adapter into its base model (docs/lora.md): each adapted projection becomes
// W + s·B·A (PEFT's merge_and_unload; with DoRA each row of it times m/‖row‖), a base tensor the
// adapter holds (modules_to_save) replaces the base's, every other tensor is the base's. `export
// --merge-lora` writes the merge as a model directory; `generate --adapter` decodes with it in
// memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/model_dir.h"
#include "io/peft_adapter_file.h"
#include "model/tensor_source.h"

namespace zt {

// The base model directory with the adapter directory merged in, read as a model without
// adapters: config() is the base's, and a read gives the merged values in fp32 (the sum over the
// rank in fp32, in k order). Errors name the adapter's file and tensor, or the base's.
class LoraMergedSource : public TensorSource {
 public:
  LoraMergedSource(const std::string& base_dir, const std::string& adapter_dir);

  const ModelConfig& config() const override { return base_.config(); }
  std::string description() const override;
  void read_range_f32(const TensorInfo& t, int64_t begin, int64_t count, float* out) override;

 private:
  ModelDirReader base_;
  std::string adapter_dir_;
  PeftAdapterReader adapter_;
  // the current projection's A [r, in], B's rows of the read and the base's rows it touches
  std::vector<float> a_, b_, rows_;
};

// Where the merged model's tokenizer is read: the adapter directory when it holds tokenizer.json
// (a LoRA run's OUT/final carries its data's tokenizer, with the chat template the run was
// trained on), else the base directory.
std::string merged_model_tokenizer_dir(const std::string& base_dir, const std::string& adapter_dir);

// Where the merged model's generation_config.json (its EOS list) is read: the tokenizer's
// directory when it holds one, else the base directory (PEFT and TRL save the tokenizer beside an
// adapter, not the generation config).
std::string merged_model_generation_config_dir(const std::string& base_dir,
                                               const std::string& adapter_dir);

// Writes the merged model as a bf16 model directory at `dir` (tensor by tensor in bounded
// chunks, into a temporary sibling moved into place), with the tokenizer files of
// merged_model_tokenizer_dir (none where neither directory has any). Returns the tensor bytes
// written.
uint64_t write_merged_model_dir(const std::string& base_dir, const std::string& adapter_dir,
                                const std::string& dir, bool overwrite);

}  // namespace zt

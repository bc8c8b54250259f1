// Merging a PEFT LoRA adapter into its base model (`export --merge-lora`, docs/lora.md): each
// adapted projection becomes W + s·B·A (PEFT's merge_and_unload), a base tensor the adapter holds
// (modules_to_save) replaces the base's, every other tensor is copied.
#pragma once
#include <cstdint>
#include <string>

namespace zt {

// Writes the merged model as a bf16 model directory at `dir` (tensor by tensor in bounded
// chunks, into a temporary sibling moved into place), with the base directory's tokenizer files.
// Errors name the adapter's file and tensor, or the base's. Returns the tensor bytes written.
uint64_t write_merged_model_dir(const std::string& base_dir, const std::string& adapter_dir,
                                const std::string& dir, bool overwrite);

}  // namespace zt

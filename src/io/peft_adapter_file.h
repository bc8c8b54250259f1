// PEFT's adapter directory (docs/lora.md): adapter_config.json and adapter_model.safetensors, its
// tensors named as PEFT's get_peft_model_state_dict names them: base_model.model.<module>.lora_A
// .weight [r, in], ….lora_B.weight [out, r], and base_model.model.<name> for a base tensor that
// trains in full (modules_to_save). This reads one back, as the values a run starts from
// (`train --lora-init-from`) or merges into its base (`export --merge-lora`).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "io/weight_file.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/tensor_source.h"

namespace zt {

constexpr const char* kPeftConfigFile = "adapter_config.json";
constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";
constexpr const char* kPeftPytorchWeightsFile = "adapter_model.bin";  // PEFT before 0.7's default
constexpr const char* kPeftNamePrefix = "base_model.model.";

// An adapter_config.json read for `use` (LoraSpec::from_peft_file; with `parsed`, its JSON handed
// back), warning on rank 0 of each key that is none of PEFT's LoraConfig keys zerotrain knows (a
// newer PEFT's, read past as PEFT reads past the keys it does not know).
LoraSpec read_peft_adapter_config(const std::string& path, LoraSpec::Use use,
                                  nlohmann::json* parsed = nullptr);

// The model a trained adapter directory belongs to: `base` (the base model's configuration) with
// the LoraSpec of DIR's adapter_config.json, read as trained weights (LoraSpec::Use). What eval
// and generate --adapter and export --merge-lora open a PeftAdapterReader for.
ModelConfig adapter_model_config(const std::string& dir, ModelConfig base);

// DIR's weights as PEFT's from_pretrained picks them: adapter_model.safetensors, else
// adapter_model.bin (a PyTorch checkpoint, weight_file.h); neither is an error naming DIR.
std::string peft_weights_path(const std::string& dir);

class PeftAdapterReader : public TensorSource {
 public:
  // Opens DIR for `model`: the base model's configuration with the adapters' LoraSpec, the one read
  // from DIR's adapter_config.json (LoraSpec::from_peft_file; train reads it once, with its
  // options); config() is it. Every tensor of the file must name a tensor of that model (an
  // adapter, or a base tensor of modules_to_save) in its shape, and every adapter tensor must be
  // there; errors name the file and the tensor, as does a value read that is not finite. The
  // weights are adapter_model.safetensors or, without it, adapter_model.bin (peft_weights_path).
  PeftAdapterReader(const std::string& dir, const ModelConfig& model);

  const ModelConfig& config() const override { return config_; }
  std::string description() const override { return "PEFT adapter '" + dir_ + "'"; }
  bool holds(const TensorInfo& t) const override { return names_.count(t.name) > 0; }
  void read_range_f32(const TensorInfo& t, int64_t begin, int64_t count, float* out) override;
  const ParamLayout& layout() const { return layout_; }
  // The base tensors the file holds (modules_to_save), by their model names.
  std::vector<std::string> base_tensors() const;

 private:
  std::string dir_;
  ModelConfig config_;
  ParamLayout layout_;
  WeightFile file_;
  std::map<std::string, std::string> names_;  // model name -> the file's name
};

}  // namespace zt

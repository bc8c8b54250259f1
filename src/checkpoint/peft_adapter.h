// LoRA adapters as Hugging Face PEFT's adapter directory (docs/lora.md): adapter_config.json
// (model/lora.h's LoraSpec::to_peft_json) and adapter_model.safetensors, whose tensors are named
// as PEFT's get_peft_model_state_dict names them: base_model.model.<module>.lora_A.weight
// [r, in], ….lora_B.weight [out, r], and base_model.model.<name> for each base tensor that
// trains in full (modules_to_save). The values are the fp32 masters, so a reload continues
// exactly. peft.PeftModel.from_pretrained(base, DIR) loads it onto the base model.
#pragma once
#include <string>

#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"

namespace zt {

constexpr const char* kPeftConfigFile = "adapter_config.json";
constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";
constexpr const char* kPeftNamePrefix = "base_model.model.";

// Writes the engine's adapters (and trained base tensors) to `dir`, replacing what is there.
// Collective over comm (every rank gathers its shards); rank 0 writes DIR's temporary sibling and
// renames it into place, so `dir` is never half-written. base_model: adapter_config.json's
// base_model_name_or_path.
void write_peft_adapter(ZeroEngine& engine, const std::string& dir, MpiCommunicator& comm,
                        const std::string& base_model);

}  // namespace zt

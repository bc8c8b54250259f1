// A run's LoRA adapters as Hugging Face PEFT's adapter directory (io/peft_adapter_file.h):
// adapter_config.json (model/lora.h's LoraSpec::to_peft_json) and adapter_model.safetensors
// holding the fp32 masters, so a reload continues exactly. peft.PeftModel.from_pretrained(base,
// DIR) loads it onto the base model.
#pragma once
#include <string>

#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "io/peft_adapter_file.h"  // the directory's names

namespace zt {

// Writes the engine's adapters (and trained base tensors) to `dir`, replacing what is there.
// Collective over comm (every rank gathers its shards); rank 0 writes DIR's temporary sibling and
// renames it into place, so `dir` is never half-written. base_model: adapter_config.json's
// base_model_name_or_path.
void write_peft_adapter(ZeroEngine& engine, const std::string& dir, MpiCommunicator& comm,
                        const std::string& base_model);

}  // namespace zt

// A run's LoRA adapters as Hugging Face PEFT's adapter directory (io/peft_adapter_file.h):
// adapter_config.json (model/lora.h's LoraSpec::to_peft_json) and adapter_model.safetensors
// holding the fp32 masters of every adapter tensor and of every base tensor that trains
// (modules_to_save, whose modules' full names adapter_config.json lists), so a reload continues
// exactly. peft.PeftModel.from_pretrained(base, DIR) loads it onto the base model.
#pragma once
#include <string>

#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "io/model_dir.h"          // TensorValuesFn
#include "io/peft_adapter_file.h"  // the directory's names
#include "model/trainable.h"

namespace zt {

// Writes the adapter directory of `layout` (a model with LoRA; `trainable` says which base
// tensors train) at `dir`, the values from `values` (read whole, one tensor at a time): DIR's
// temporary sibling, renamed into place, so `dir` is never half-written. An existing non-empty
// `dir` is refused unless `overwrite` (then replaced).
// Not collective. base_model: adapter_config.json's base_model_name_or_path. Returns the tensor
// bytes written.
uint64_t write_peft_adapter_dir(const std::string& dir, const ParamLayout& layout,
                                const TrainableSet& trainable, const std::string& base_model,
                                const TensorValuesFn& values, bool overwrite);

// The engine's adapters (gathered from every rank's shards) through write_peft_adapter_dir on
// rank 0, replacing `dir`. Refused on every rank when a master is not finite (NaN or infinity):
// diverged adapters are not published as a result. Collective over comm.
void write_peft_adapter(ZeroEngine& engine, const std::string& dir, MpiCommunicator& comm,
                        const std::string& base_model);

}  // namespace zt

// An EngineSpec (engine/engine_spec.h) as JSON: what train writes under run.json's "engine", so
// that whatever reads a run back (the study report's memory estimate) rebuilds the very engine
// the run built, auto choices resolved, rather than re-deriving it from the options.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine_spec.h"

namespace zt {

// Every field: the model as its config.json (LoRA adapters included), ZeRO, the precision and
// activation storage, the batch geometry, checkpointing, offload (host_adam_cpus excepted: a
// placement, not a shape; and pin_memory, fast_init, which change neither shape nor memory), the
// frozen tensors by name, AdamW and loss scaling.
nlohmann::json engine_spec_to_json(const EngineSpec& spec);

// The spec written by engine_spec_to_json. A missing key or a value of the wrong type or name is
// a zt::Error naming `source` and the key; not validated (EngineSpec::validate).
EngineSpec engine_spec_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace zt

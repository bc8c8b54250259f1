// estimate's options: the engine's (RunEngineOptions) at estimate's defaults, the world and the
// device to plan for, and what to print; parsed from the command line and a --deepspeed JSON.
#pragma once
#include <string>

#include "app/run_setup.h"
#include "backend/attention_choice.h"
#include "backend/backend_choice.h"
#include "model/config.h"

namespace zt {

inline constexpr const char* kEstimateCommand = "estimate";

// Besides the engine's options (RunEngineOptions, app/run_setup.h), at estimate's defaults: one
// sequence of 2048 tokens per micro-batch.
struct EstimateOptions : RunEngineOptions {
  EstimateOptions() {
    micro_batch = 1;
    seq_len = 2048;
    document_masking = AutoSwitch::kOff;  // on | off: the planned run's mode
  }
  std::string model_dir, preset, deepspeed;
  int world = 1;
  double device_memory_gib = 0;  // 0: no recommendation
  bool max_micro_batch = false;  // the largest micro-batch per stage in device_memory_gib
  int ranks_per_node = 0;        // 0: min(world, 8)
  bool json = false;
  bool list_plan = false;                  // --plan
  std::string checkpoint_frozen = "auto";  // train's --checkpoint-frozen: the checkpoint's size
};

// Parses estimate's options and the model they name (--model's config.json or --preset); false
// when --help was printed. Throws zt::Error naming the option on bad input.
bool parse_estimate_options(int argc, char** argv, EstimateOptions& o, ModelConfig& model);

}  // namespace zt

// Helpers shared by the commands that run the model (train, eval): option checks that name the
// flag, the activation-checkpointing policy, and collective error agreement across ranks.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "comm/collective_outcome.h"  // run_collectively (lives in the core library)
#include "comm/communicator.h"
#include "engine/checkpoint_policy.h"  // parse_checkpointing_policy (moved there)
#include "model/config.h"
#include "model/llama.h"

namespace zt {

// Fails "<command>: --<option> must be positive, got <value>" unless value > 0.
void check_positive(double value, const std::string& option, const std::string& command);

// Fails naming both numbers when seq_len exceeds the model's max_position_embeddings.
void check_seq_len(const ModelConfig& config, int64_t seq_len, const std::string& model_source,
                   const std::string& command);

}  // namespace zt

// Helpers shared by the commands that run the model (train, eval): option checks that name the
// flag, the activation-checkpointing policy, and collective error agreement across ranks.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

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

// Runs fn on this rank (it may do rank-local work, e.g. rank 0 writing a file), then agrees
// with every rank of comm on the outcome: if fn threw anywhere, every rank throws — the failing
// rank its own error, the others one that names the failing rank — so no rank is left waiting
// in a collective. Collective over comm.
void run_collectively(Communicator& comm, const std::function<void()>& fn);

}  // namespace zt

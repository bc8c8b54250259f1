// Activation-checkpointing policy strings, shared by every command and config mapping that
// selects a policy (train, eval, estimate, the DeepSpeed JSON mapping).
#pragma once
#include <string>

#include "model/llama.h"

namespace zt {

// "none" | "selective" | "full" | "every:K" (K >= 1); on_host from --cpu-checkpointing. Throws
// zt::Error naming the bad policy.
ActivationCheckpointing parse_activation_checkpointing(const std::string& policy, bool on_host);
// The policy with its kept layer inputs on the host or not: on_host with a policy that keeps none
// ("none", "selective") is a zt::Error naming --cpu-checkpointing.
ActivationCheckpointing with_inputs_on_host(ActivationCheckpointing policy, bool on_host);
std::string activation_checkpointing_name(const ActivationCheckpointing& ac);

}  // namespace zt

#include "engine/activation_checkpointing.h"

#include "util/error.h"

namespace zt {

ActivationCheckpointing parse_activation_checkpointing(const std::string& policy, bool on_host) {
  ActivationCheckpointing ac;
  const std::string expected = " (expected none, selective, full or every:K with K >= 1)";
  if (policy == "none") {
    ac.every = 0;
  } else if (policy == "selective") {
    ac.selective = true;
  } else if (policy == "full") {
    ac.every = 1;
  } else if (policy.rfind("every:", 0) == 0) {
    const std::string k = policy.substr(6);
    size_t used = 0;
    long value = 0;
    try {
      value = std::stol(k, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ZT_CHECK(!k.empty() && used == k.size() && value >= 1 && value <= 1'000'000,
             "--activation-checkpointing: bad policy '" + policy + "'" + expected);
    ac.every = static_cast<int>(value);
  } else {
    fail("--activation-checkpointing: bad policy '" + policy + "'" + expected);
  }
  return with_inputs_on_host(ac, on_host);
}

ActivationCheckpointing with_inputs_on_host(ActivationCheckpointing policy, bool on_host) {
  ZT_CHECK(!(on_host && policy.every == 0),
           "--cpu-checkpointing needs --activation-checkpointing full or every:K (it moves the "
           "kept layer inputs to the host; '" +
               activation_checkpointing_name(policy) + "' keeps none)");
  policy.on_host = on_host;
  return policy;
}

std::string activation_checkpointing_name(const ActivationCheckpointing& ac) {
  if (ac.selective) return "selective";
  if (ac.every == 0) return "none";
  if (ac.every == 1) return "full";
  return "every:" + std::to_string(ac.every);
}

}  // namespace zt

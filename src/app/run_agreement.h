// Ranks agree on the run before step 1. Every rank states, as (setting, value) pairs, what must
// be the same everywhere — the resolved options, the model's configuration, the dataset's
// identity, the checkpoint being resumed — and the ranks compare: a difference is an error on
// every rank naming each setting that differs and every rank's value, instead of a crash in a
// collective whose sizes disagree or a run that silently trains different replicas.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace zt {

using RunSettings = std::vector<std::pair<std::string, std::string>>;

// Collective over comm. Cheap when the ranks agree (one all-gather of a CRC); throws AgreedError
// on every rank when they do not.
void agree_on_run(Communicator& comm, const RunSettings& settings);

}  // namespace zt

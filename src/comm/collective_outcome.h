// Agreement on success or failure across the ranks of a communicator, so that an error on one
// rank (a file it could not write, a checksum it could not verify) never leaves the others
// waiting in a collective.
#pragma once
#include <functional>

#include "comm/communicator.h"

namespace zt {

// Runs fn on this rank (it may do rank-local work, e.g. rank 0 writing a file), then agrees
// with every rank of comm on the outcome: if fn threw anywhere, every rank throws — the failing
// rank its own error, the others one that names the failing rank — so no rank is left waiting
// in a collective. Collective over comm.
void run_collectively(Communicator& comm, const std::function<void()>& fn);

}  // namespace zt

// Agreement on success or failure across the ranks of a communicator, so that an error on one
// rank (a file it could not write, a checksum it could not verify) never leaves the others
// waiting in a collective.
#pragma once
#include <functional>

#include "comm/communicator.h"

namespace zt {

// Runs fn on this rank (it may do rank-local work, e.g. rank 0 writing a file), then agrees
// with every rank of comm on the outcome: if fn threw anywhere, every rank throws an AgreedError
// — a failing rank its own message, the others "rank R failed: <R's message>" for the first
// failing rank R — so no rank is left waiting in a collective and every rank's output says why.
// fn must not itself issue collectives that a failing rank could skip. Collective over comm.
void run_collectively(Communicator& comm, const std::function<void()>& fn);

}  // namespace zt

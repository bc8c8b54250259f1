// How a command's error reaches the user: one line per rank, "zerotrain CMD: error (rank R of N):
// WHAT", then MPI's end (an error every rank agreed on finalises; any other aborts the job, since
// other ranks may wait in a collective this rank will never join). main() reports what a command
// throws; train reports a rank-local error from its loop itself, before the device and its
// communicator are torn down (docs/troubleshooting.md).
#pragma once
#include <string>

#include "runtime/mpi_runtime.h"
#include "util/error.h"

namespace zt {

// Inside a catch handler: prints the exception being handled as `command`'s error line (an
// internal error for what is not a zt::Error or std::bad_alloc) and ends MPI as above. Returns
// the exit code (1) when MPI was not running or was finalised.
int report_error_and_end_mpi(const std::string& command);

// Runs fn and returns its exit code. An error that every rank agreed on (AgreedError) goes on to
// the caller; any other is reported and ends the job here, while the caller's objects (a GPU,
// its NCCL communicator) are still alive: their teardown could wait for peers that wait in a
// collective this rank will never join, and the error would never be printed.
// (A rank alone has no peer to wait for: its errors go on to the caller too.)
template <typename Fn>
int report_rank_local_errors_here(const std::string& command, Fn&& fn) {
  try {
    return fn();
  } catch (const AgreedError&) {
    throw;
  } catch (...) {
    if (mpi_world_size_if_running() <= 1) throw;
    return report_error_and_end_mpi(command);
  }
}

}  // namespace zt

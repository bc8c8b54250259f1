#include "comm/collective_outcome.h"

#include <string>
#include <vector>

#include "util/error.h"

namespace zt {

void run_collectively(Communicator& comm, const std::function<void()>& fn) {
  std::string error;
  try {
    fn();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  // Each rank contributes 1 in its own slot when it failed; the sum tells everyone who failed.
  std::vector<int32_t> failed(static_cast<size_t>(comm.world_size()), 0);
  failed[static_cast<size_t>(comm.rank())] = error.empty() ? 0 : 1;
  comm.all_reduce_sum_blocking(failed.data(), failed.size());
  if (!error.empty()) fail(error);
  for (size_t r = 0; r < failed.size(); ++r)
    if (failed[r]) fail("rank " + std::to_string(r) + " failed (see its error message)");
}

}  // namespace zt

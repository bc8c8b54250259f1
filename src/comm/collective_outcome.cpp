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
  int first = -1, count = 0;
  for (size_t r = 0; r < failed.size(); ++r) {
    if (!failed[r]) continue;
    if (first < 0) first = static_cast<int>(r);
    ++count;
  }
  if (first < 0) return;
  // The first failing rank's message, to every rank: its length, then its bytes.
  int64_t length = comm.rank() == first ? static_cast<int64_t>(error.size()) : 0;
  comm.broadcast_blocking(&length, 1, first);
  std::string message(static_cast<size_t>(length), '\0');
  if (comm.rank() == first) message = error;
  comm.broadcast_blocking(reinterpret_cast<uint8_t*>(message.data()), message.size(), first);
  if (!error.empty()) throw AgreedError(error);
  std::string text = "rank " + std::to_string(first) + " failed: " + message;
  if (count > 1) text += " (and " + std::to_string(count - 1) + " more rank(s))";
  throw AgreedError(text);
}

}  // namespace zt

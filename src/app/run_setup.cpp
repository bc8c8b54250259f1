#include "app/run_setup.h"

#include <sstream>
#include <vector>

#include "util/error.h"

namespace zt {

void check_positive(double value, const std::string& option, const std::string& command) {
  if (value > 0) return;
  std::ostringstream v;
  v << value;
  fail(command + ": --" + option + " must be positive, got " + v.str());
}

void check_seq_len(const ModelConfig& config, int64_t seq_len, const std::string& model_source,
                   const std::string& command) {
  ZT_CHECK(seq_len <= config.max_position_embeddings,
           command + ": --seq-len " + std::to_string(seq_len) +
               " exceeds max_position_embeddings " +
               std::to_string(config.max_position_embeddings) + " of " + model_source);
}

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

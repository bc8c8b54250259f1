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

}  // namespace zt

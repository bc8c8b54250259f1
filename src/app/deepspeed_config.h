// DeepSpeed JSON configs (`--deepspeed FILE`) mapped onto zerotrain's options.
// The file's values are translated into the commands' long option names (zero-stage, lr,
// micro-batch, ...) and stored only for options the command line or the --config INI left at
// their defaults, so the precedence is: command line > --config INI > --deepspeed JSON >
// built-in defaults. As in DeepSpeed, a file that enables neither fp16 nor bf16 trains in fp32.
// "auto" resolves as the Hugging Face Trainer resolves it: reduce_bucket_size = d²,
// stage3_prefetch_bucket_size = 0.9·d², stage3_param_persistence_threshold = 10·d; every other
// "auto" takes the value of the matching zerotrain option (command line, INI or default), as the
// Trainer takes its own arguments. Unknown keys inside zero_optimization (and its offload
// blocks), optimizer, scheduler, fp16 and bf16 are refused naming the key and the closest valid
// one, as DeepSpeed refuses them; elsewhere they are warnings. Keys DeepSpeed accepts that change
// the training and are not implemented are refused unless they hold DeepSpeed's default. Bad
// values are zt::Errors naming the file and the key. docs/deepspeed.md's table lists every key.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "app/deepspeed_mapping.h"
#include "model/config.h"
#include "util/error.h"

namespace zt {

// DeepSpeed's rule train_batch_size = micro × accum × world; any two determine the third.
struct BatchSizeRule {
  std::optional<int64_t> train_batch_size, micro_batch, grad_accum;  // explicitly given
  std::string source;                                                // the file, for messages
};

// Resolves micro/accum for `world` ranks (their values are used where the rule leaves them
// free; the commands have checked both are at least 1). Throws naming the numbers on a
// contradiction or a world size that does not divide.
void apply_batch_size_rule(const BatchSizeRule& rule, int world, int64_t& micro, int64_t& accum);

// The mapping's key of the fp32 precision a file implies by enabling neither fp16 nor bf16.
constexpr const char* kNoPrecisionBlock = "(neither fp16 nor bf16 enabled)";

// Parses a DeepSpeed config object; `model` resolves the size-dependent "auto" values.
DeepSpeedConfig parse_deepspeed_config(const nlohmann::json& j, const std::string& source,
                                       const ModelConfig& model);
DeepSpeedConfig load_deepspeed_config(const std::string& path, const ModelConfig& model);

struct AppliedDeepSpeedFile {
  BatchSizeRule batch_rule;
  std::vector<std::string> options_set;  // long option names whose value came from the file
  // For run.json: {"file", "sha256", "mapping": [{"key", "option", "value", "applied"}],
  // "warnings"}; "applied" is false where the command line or INI set the option.
  nlohmann::json record;
};

// Runs `validate`; an error naming one of `applied`'s options (as "--name") is rethrown saying
// that the value came from the DeepSpeed file, so a bad JSON value is traced to its file.
template <typename Validate>
void validate_naming_deepspeed_file(const std::string& path,
                                    const std::vector<std::string>& options_set, Validate validate);

// Loads FILE, prints its warnings on stderr (rank 0 of the launch only), stores its values into
// vm for the options of `desc` that are unset or defaulted, and re-notifies vm. Offload devices
// the command cannot run (offload_param always; offload_optimizer unless `desc` has an
// --offload-optimizer option) are a "not implemented yet" error naming the key. Returns the
// batch-size rule with micro/accum as finally given (JSON or command line/INI) and the options
// the file set.
AppliedDeepSpeedFile apply_deepspeed_file(const std::string& path, const ModelConfig& model,
                                          const boost::program_options::options_description& desc,
                                          boost::program_options::variables_map& vm);

// The error's text with " (from DeepSpeed config PATH)" when it names one of the options.
std::string attributed_to_deepspeed_file(const std::string& what, const std::string& path,
                                         const std::vector<std::string>& options_set);

template <typename Validate>
void validate_naming_deepspeed_file(const std::string& path,
                                    const std::vector<std::string>& options_set,
                                    Validate validate) {
  try {
    validate();
  } catch (const Error& e) {
    fail(attributed_to_deepspeed_file(e.what(), path, options_set));
  }
}

}  // namespace zt

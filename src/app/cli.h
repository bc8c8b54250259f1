// Shared option handling for every subcommand: --help, --config FILE (INI, same keys as the
// long flags), command-line flags overriding the file, clear errors for unknown/missing options.
#pragma once
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "backend/backend_choice.h"
#include "engine/zero_config.h"
#include "util/decimal.h"

namespace zt {

namespace po = boost::program_options;

struct CommandSpec {
  std::string name;     // e.g. "init"
  std::string summary;  // one line for `zerotrain --help`
  std::string usage;    // e.g. "zerotrain init --preset NAME --out DIR [options]"
};

// Parses argv (argv[0] is the subcommand name) against `options` plus the common --help and
// --config. Positional options may be given. Only full option names are accepted (Boost's
// abbreviation guessing is off: a script that worked must not break when an option is added);
// an unknown one is refused with the names it may have meant. Returns false when --help was printed
// (the caller returns 0). Throws zt::Error on bad input.
bool parse_command_line(const CommandSpec& spec, po::options_description& options,
                        const po::positional_options_description* positional, int argc, char** argv,
                        po::variables_map& vm);

// A boolean option: `--name` alone means true, `--name=false` is accepted too.
po::typed_value<bool>* bool_flag(bool* target, bool fallback);

// A float or double option whose --help default is the shortest decimal that reads back to it
// (--lr (=0.0003), not (=0.000300000014)).
template <typename T>
po::typed_value<T>* decimal_option(T* target) {
  return po::value<T>(target)->default_value(*target, shortest_decimal(*target));
}

// --comm-timeout SECONDS (default Communicator::kDefaultTimeoutSeconds): how long a collective
// may wait before the job is ended with a report; 0 or inf: no timeout.
void add_comm_timeout_option(po::options_description& options, double* seconds);
// Fails naming `command`'s --comm-timeout unless it is >= 0 (NaN refused).
void check_comm_timeout(double seconds, const std::string& command);

// --attention gemm | fused | auto (backend/attention_choice.h): the CUDA backend's attention.
void add_attention_option(po::options_description& options, std::string* value);
// --document-masking auto | on | off (train and eval; docs/fine-tuning.md): whether packed
// documents attend only within themselves, their positions restarting at each document.
void add_document_masking_option(po::options_description& options, std::string* value);
// The mode resolved for a dataset that records `documents` boundaries (0: none): auto masks when
// it holds more than one document (with one, the masks are plain causal attention); on without
// boundaries, or a value other than the three, is a zt::Error naming the option, the value and
// the file.
bool resolve_document_masking(const std::string& mode, int64_t documents,
                              const std::string& data_path, const std::string& command);
// Only the value (before the dataset is open).
void check_document_masking_value(const std::string& mode, const std::string& command);
// --activations fp32 | bf16 | fp16 (train, eval and estimate: parse_activation_storage).
void add_activations_option(po::options_description& options, std::string* value);
// The default --activations ("fp16" | "bf16" | "fp32"): the precision's 16-bit type where it is
// the precision's fast path, else fp32. --precision fp16 stores fp16 activations on every
// backend, as a DeepSpeed fp16 model's are (the loss scaler's overflows come from them);
// --precision bf16 stores bf16 ones on the CUDA backend (half the memory, twice the throughput
// with the fused attention) and fp32 ones on the CPU backend, whose fp32 activations are the
// reference arithmetic.
std::string default_activation_storage(const std::string& precision, BackendKind backend);
// After parsing: --activations left unset becomes that default for the command's --backend
// resolved.
void default_activations(const po::variables_map& vm, Precision precision, BackendKind backend,
                         std::string* activations);

// --precision bf16 | fp16 | fp32 (train, eval, estimate), parsed into its enum as the option is
// read, from the command line, a --config INI or a --deepspeed JSON alike; another value is a
// zt::Error naming the option. *value is the default.
po::typed_value<Precision>* precision_value(Precision* value);
// boost::program_options' parser of a Precision value (found by argument-dependent lookup).
void validate(boost::any& v, const std::vector<std::string>& values, Precision*, int);

// --trainable REGEX and --freeze REGEX, each repeatable (model/trainable.h: which tensors train).
void add_trainable_options(po::options_description& options, std::vector<std::string>* trainable,
                           std::vector<std::string>* freeze);

// " (did you mean --a or --b?)" for an unknown option `given`: every known long name it is a
// prefix of, else the closest one by edit distance when it is close; "" when nothing is.
std::string did_you_mean(const std::string& given, const po::options_description& options);

// Fails with a message naming the missing option unless vm has it.
void require_option(const po::variables_map& vm, const std::string& name,
                    const std::string& command);

// Refuses to write into an existing non-empty directory unless overwrite is set.
void check_output_dir(const std::string& path, bool overwrite);

}  // namespace zt

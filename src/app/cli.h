// Shared option handling for every subcommand: --help, --config FILE (INI, same keys as the
// long flags), command-line flags overriding the file, clear errors for unknown/missing options.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "backend/attention_choice.h"
#include "backend/backend_choice.h"
#include "engine/engine_spec.h"
#include "engine/zero_config.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

namespace po = boost::program_options;

struct CommandSpec {
  std::string name;     // e.g. "init"
  std::string summary;  // one line for `zerotrain --help`
  std::string usage;    // e.g. "zerotrain init --preset NAME --out DIR [options]"
  // Another command's options whose keys a --config INI may hold too, read past with a note
  // naming them (estimate reads a train INI: its data, out, steps, ...); null: none.
  const po::options_description* config_keys_of = nullptr;
  std::string config_keys_owner = {};  // that command's name, for the note
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

// An option whose value is a word parsed into T as it is read, from the command line, a --config
// INI or a --deepspeed JSON alike, so that no later step holds or parses the word: `parse` throws a
// zt::Error naming the option, which becomes the command's error. With a `default_word` the
// option's default is *target's value, shown so in --help; without one it is left unset.
template <typename T>
class WordOption final : public po::value_semantic_codecvt_helper<char> {
 public:
  using Parse = std::function<T(const std::string&)>;
  WordOption(T* target, Parse parse, std::optional<std::string> default_word)
      : target_(target),
        default_(*target),
        parse_(std::move(parse)),
        default_word_(std::move(default_word)) {}
  std::string name() const override {
    return default_word_ ? "arg (=" + *default_word_ + ")" : "arg";
  }
  unsigned min_tokens() const override { return 1; }
  unsigned max_tokens() const override { return 1; }
  bool is_composing() const override { return false; }
  bool is_required() const override { return false; }
  bool apply_default(boost::any& store) const override {
    if (!default_word_) return false;
    store = default_;
    return true;
  }
  void notify(const boost::any& store) const override {
    if (!store.empty()) *target_ = boost::any_cast<T>(store);
  }

 protected:
  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override {
    po::validators::check_first_occurrence(store);
    const std::string& word = po::validators::get_single_string(tokens);
    try {
      store = parse_(word);
    } catch (const Error& e) {
      throw po::error(e.what());
    }
  }

 private:
  T* target_;
  T default_;
  Parse parse_;
  std::optional<std::string> default_word_;
};
template <typename T>
po::value_semantic* word_option(T* target, typename WordOption<T>::Parse parse,
                                std::optional<std::string> default_word) {
  return new WordOption<T>(target, std::move(parse), std::move(default_word));
}

// An option that is auto, on or off (--document-masking, --offload-optimizer-overlap).
enum class AutoSwitch { kAuto, kOn, kOff };
// "auto" | "on" | "off"; anything else is a zt::Error naming `option` and the value.
AutoSwitch parse_auto_switch(const std::string& text, const std::string& option);
const char* auto_switch_name(AutoSwitch value);
// *target, parsed as the option is read, its value the default.
po::value_semantic* auto_switch_option(AutoSwitch* target, const std::string& option);

// --eval-batches (train) and --batches (eval): a count K >= 0, or "all" (kAllEvalBatches, every
// whole window of the set); anything else is a zt::Error naming `option`. *target is the default.
int64_t parse_eval_batches(const std::string& text, const std::string& option);
std::string eval_batches_name(int64_t batches);  // "all" or the count
po::value_semantic* eval_batches_option(int64_t* target, const std::string& option);

// --precision bf16 | fp16 | fp32 (train, eval, estimate), parsed into its enum as the option is
// read; another value is a zt::Error naming the option. *target is the default.
po::value_semantic* precision_option(Precision* target);

// --backend cpu | cuda | auto (backend/backend_choice.h), parsed as it is read; *target is the
// default.
po::value_semantic* backend_option(BackendRequest* target);

// --attention gemm | fused | auto (backend/attention_choice.h): the CUDA backend's attention.
void add_attention_option(po::options_description& options, AttentionRequest* value);
// --deterministic (default *value): false lets the CUDA backend run faster kernels whose bits vary
// from run to run (CudaBackendOptions::deterministic; train and estimate).
void add_deterministic_option(po::options_description& options, bool* value);
// --document-masking auto | on | off (train and eval; docs/fine-tuning.md): whether packed
// documents attend only within themselves, their positions restarting at each document.
void add_document_masking_option(po::options_description& options, AutoSwitch* value);
// The mode resolved for a dataset that records `documents` boundaries (0: none): auto masks when
// it holds more than one document (with one, the masks are plain causal attention); on without
// boundaries is a zt::Error naming the option and the file.
bool resolve_document_masking(AutoSwitch mode, int64_t documents, const std::string& data_path,
                              const std::string& command);

// --activations fp32 | bf16 | fp16 (train, eval and estimate): the activations' storage type,
// parsed as it is read (check_activation_storage, app/engine_device.h, checks it against the
// precision). Left unset, it is the precision's and backend's default (default_activations).
void add_activations_option(po::options_description& options, DType* value);
// (Its words: parse_activation_storage and activation_storage_name, engine/engine_spec.h.)
// The default --activations: the precision's 16-bit type where it is the precision's fast path,
// else fp32. --precision fp16 stores fp16 activations on every backend, as a DeepSpeed fp16
// model's are (the loss scaler's overflows come from them); --precision bf16 stores bf16 ones on
// the CUDA backend (half the memory, twice the throughput with the fused attention) and fp32 ones
// on the CPU backend, whose fp32 activations are the reference arithmetic.
DType default_activation_storage(Precision precision, BackendKind backend);
// After parsing: --activations left unset becomes that default for the command's --backend
// resolved.
void default_activations(const po::variables_map& vm, Precision precision, BackendKind backend,
                         DType* activations);

// --trainable REGEX and --freeze REGEX, each repeatable (model/trainable.h: which tensors train).
void add_trainable_options(po::options_description& options, std::vector<std::string>* trainable,
                           std::vector<std::string>* freeze);

// " (did you mean --a or --b?)" for an unknown option `given`: every known long name it is a
// prefix of, else the closest one by edit distance when it is close; "" when nothing is. A
// Hugging Face TrainingArguments name of an option spelt otherwise here (learning_rate,
// per_device_train_batch_size, ...) names that option instead.
std::string did_you_mean(const std::string& given, const po::options_description& options);

// The warning for a key of a model's config file (config.json, params.json) that zerotrain
// neither reads nor knows, accepted as not changing the model: "zerotrain COMMAND: warning: FILE
// key 'KEY' is not one zerotrain reads or knows (did you mean 'HINT'?); accepted as not changing
// the model (WHY; --strict-config refuses it)", without the question when `hint` is "".
std::string unknown_config_key_warning(const std::string& command, const std::string& file,
                                       const std::string& key, const std::string& hint,
                                       const std::string& why);

// The items of a comma-separated option value, each without the blanks around it ("a, b" gives
// a and b; "" gives one empty item, "a," an empty last one, for the caller to refuse).
std::vector<std::string> split_commas(const std::string& text);

// " (a Hub id: ...)" when `path` does not exist and reads as a Hugging Face Hub id (ORG/NAME,
// no local ORG, no .json name): Hub ids are not downloaded, and the hint names the command that
// fetches one (huggingface_hub's `hf download`); "" otherwise.
std::string hub_id_hint(const std::string& path);

// Fails with a message naming the missing option unless vm has it.
void require_option(const po::variables_map& vm, const std::string& name,
                    const std::string& command);

// Refuses to write into an existing non-empty directory unless overwrite is set.
void check_output_dir(const std::string& path, bool overwrite);

}  // namespace zt

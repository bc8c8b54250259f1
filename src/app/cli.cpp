#include "app/cli.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>
#include <vector>

#include "io/data_loader.h"
#include "io/run_directory.h"
#include "util/closest_name.h"
#include "util/error.h"
#include "util/word_choice.h"

namespace zt {

namespace {

// Stores --config FILE's values under those already in `vm` (the command line's, which win). A
// key of spec.config_keys_of that this command lacks is read past, with one note naming them all.
void store_config_file(const CommandSpec& spec, const po::options_description& options,
                       const po::options_description& all, const std::string& path,
                       po::variables_map& vm) {
  std::error_code ec;
  ZT_CHECK(!std::filesystem::is_directory(path, ec),
           spec.name + ": config file '" + path + "' (--config) is a directory");
  std::ifstream in(path);
  ZT_CHECK(in.good(), spec.name + ": cannot open config file '" + path + "'");
  const auto refuse_unknown = [&](const std::string& key, const std::string& what) {
    std::string hint = did_you_mean(key, all);
    if (hint.empty() && spec.config_keys_of) hint = did_you_mean(key, *spec.config_keys_of);
    fail(spec.name + ": config file '" + path + "': " + what + hint + " (see 'zerotrain " +
         spec.name + " --help')");
  };
  std::vector<std::string> read_past;
  try {
    const po::parsed_options parsed =
        po::parse_config_file(in, options, /*allow_unregistered=*/spec.config_keys_of != nullptr);
    for (const po::option& o : parsed.options) {
      if (!o.unregistered) continue;
      if (!spec.config_keys_of->find_nothrow(o.string_key, /*approx=*/false))
        refuse_unknown(o.string_key, "unrecognised option '" + o.string_key + "'");
      read_past.push_back(o.string_key);
    }
    po::store(parsed, vm);  // the unregistered keys are not stored
  } catch (const po::unknown_option& e) {
    std::string name = e.get_option_name();
    name.erase(0, name.find_first_not_of('-'));
    refuse_unknown(name, e.what());
  } catch (const po::error& e) {
    fail(spec.name + ": config file '" + path + "': " + e.what() + " (see 'zerotrain " + spec.name +
         " --help')");
  }
  if (read_past.empty()) return;
  std::string keys;
  for (const std::string& k : read_past) keys += (keys.empty() ? "" : ", ") + k;
  std::cerr << "zerotrain " << spec.name << ": note: config file '" << path << "': read past "
            << spec.config_keys_owner << "'s " << (read_past.size() == 1 ? "key " : "keys ") << keys
            << ", which " << spec.name << " does not take\n";
}

// "COMMAND: unexpected word 'a'" or "... unexpected words 'a', 'b'".
std::string unexpected_words(const std::string& command, const std::vector<std::string>& words) {
  std::string listed;
  for (const std::string& w : words) listed += (listed.empty() ? "'" : ", '") + w + "'";
  return command + ": unexpected word" + (words.size() == 1 ? " " : "s ") + listed;
}

// argv's parser over `all`, full option names only (Boost's abbreviation guessing is off).
po::command_line_parser full_name_parser(int argc, char** argv,
                                         const po::options_description& all) {
  po::command_line_parser parser(argc, argv);
  parser.options(all).style(po::command_line_style::default_style &
                            ~po::command_line_style::allow_guessing);
  return parser;
}

// The words on the command line of a command with no positional arguments, refused: most often
// more values of an option that takes one (`--lora-targets q_proj v_proj`, `--data a.h5 b.h5`,
// an unquoted `--chat What is`), which would otherwise be dropped in silence.
void refuse_stray_words(const std::string& command, const po::parsed_options& parsed) {
  const auto& options = parsed.options;
  for (size_t i = 0; i < options.size(); ++i) {
    if (options[i].position_key == -1) continue;
    std::vector<std::string> words;  // this one and the stray words right after it
    for (size_t j = i; j < options.size() && options[j].position_key != -1; ++j)
      words.push_back(options[j].value.empty() ? std::string() : options[j].value.front());
    std::string comma_list;
    for (const std::string& w : words) comma_list += "," + w;
    const std::string see = "see 'zerotrain " + command + " --help'";
    const std::string unexpected = unexpected_words(command, words);
    if (i == 0) fail(unexpected + ": " + command + " takes no positional arguments (" + see + ")");
    const po::option& previous = options[i - 1];
    std::string given;  // as typed
    for (const std::string& token : previous.original_tokens)
      given += (given.empty() ? "" : " ") + token;
    if (previous.value.empty())  // a switch
      fail(unexpected + " after '" + given + "', a switch that takes no value (give it alone to " +
           "turn it on; " + see + ")");
    const std::string& key = previous.string_key;
    const std::string hint =
        key == "lora-targets"
            ? "--lora-targets takes one comma-separated list: " + given + comma_list
        : key == "trainable" || key == "freeze"
            ? "repeat it for each pattern: --" + key + " A --" + key + " B"
            : "quote a value that holds spaces";
    fail(unexpected + " after '" + given + "': each option takes one value (" + hint + "; " + see +
         ")");
  }
}

// Boost's "too many positional options", with the words: those past the `positional` a command
// takes (info's one directory, export's one), read again from argv without the description.
[[noreturn]] void refuse_positional_words_past(const std::string& command,
                                               const po::positional_options_description& positional,
                                               const po::options_description& all, int argc,
                                               char** argv) {
  std::vector<std::string> words;
  for (const po::option& o : full_name_parser(argc, argv, all).run().options)
    if (o.position_key != -1 && !o.value.empty()) words.push_back(o.value.front());
  const size_t takes = positional.max_total_count();
  words.erase(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(takes));
  fail(unexpected_words(command, words) + ": " + command + " takes " + std::to_string(takes) +
       " positional argument" + (takes == 1 ? "" : "s") +
       " (quote a path that holds spaces; see 'zerotrain " + command + " --help')");
}

}  // namespace

bool parse_command_line(const CommandSpec& spec, po::options_description& options,
                        const po::positional_options_description* positional, int argc, char** argv,
                        po::variables_map& vm) {
  po::options_description common("Common options");
  common.add_options()("help,h", "print this help")(
      "config", po::value<std::string>(), "INI file with the same keys as the long options");
  po::options_description all;
  all.add(options).add(common);
  try {
    po::command_line_parser parser = full_name_parser(argc, argv, all);
    if (positional) parser.positional(*positional);
    const po::parsed_options parsed = parser.run();
    // Without a positional description Boost keeps a stray word unnamed, and store drops it.
    if (!positional) refuse_stray_words(spec.name, parsed);
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << "usage: " << spec.usage << "\n\n" << spec.summary << "\n\n" << all << "\n";
      return false;
    }
    if (vm.count("config"))
      store_config_file(spec, options, all, vm["config"].as<std::string>(), vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    std::string name = e.get_option_name();
    name.erase(0, name.find_first_not_of('-'));
    fail(spec.name + ": " + e.what() + did_you_mean(name, all) + " (see 'zerotrain " + spec.name +
         " --help')");
  } catch (const po::too_many_positional_options_error&) {
    refuse_positional_words_past(spec.name, *positional, all, argc, argv);
  } catch (const po::error& e) {
    fail(spec.name + ": " + e.what() + " (see 'zerotrain " + spec.name + " --help')");
  }
  return true;
}

namespace {

// Hugging Face TrainingArguments' (and TRL's SFTConfig's) names, dashed, of settings whose
// zerotrain option is spelt otherwise: too far apart for a closest-name suggestion.
constexpr std::pair<const char*, const char*> kHuggingFaceNames[] = {
    {"learning-rate", "lr"},
    {"per-device-train-batch-size", "micro-batch"},
    {"gradient-accumulation-steps", "grad-accum"},
    {"num-train-epochs", "epochs"},
    {"max-steps", "steps"},
    {"output-dir", "out"},
    {"model-name-or-path", "model"},
    {"max-seq-length", "seq-len"},
    {"max-length", "seq-len"},
    {"save-steps", "save-every"},
    {"save-total-limit", "keep-last"},
    {"logging-steps", "log-every"},
    {"eval-steps", "eval-every"},
    {"max-grad-norm", "clip"},
    {"adam-beta1", "beta1"},
    {"adam-beta2", "beta2"},
    {"adam-epsilon", "eps"},
    {"lr-scheduler-type", "lr-schedule"},
    {"gradient-checkpointing", "activation-checkpointing"},
    {"resume-from-checkpoint", "resume"},
    {"bf16", "precision"},
    {"fp16", "precision"}};

// " (Hugging Face's --NAME is --OPTION here)" where `given` is such a name of one of `options`.
std::string hugging_face_name_hint(const std::string& given,
                                   const std::vector<std::string>& options) {
  std::string dashed = given;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  for (const auto& [hf, ours] : kHuggingFaceNames)
    if (dashed == hf && std::find(options.begin(), options.end(), ours) != options.end())
      return " (Hugging Face's --" + given + " is --" + ours +
             (dashed == "bf16" || dashed == "fp16" ? " " + dashed : std::string()) + " here)";
  return "";
}

}  // namespace

std::string unknown_config_key_warning(const std::string& command, const std::string& file,
                                       const std::string& key, const std::string& hint,
                                       const std::string& why) {
  return "zerotrain " + command + ": warning: " + file + " key '" + key +
         "' is not one zerotrain reads or knows" +
         (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
         "; accepted as not changing the model (" + why + "; --strict-config refuses it)";
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    out.push_back(item);
    start = end + 1;
  }
  return out;
}

std::string hub_id_hint(const std::string& path) {
  const size_t slash = path.find('/');
  const auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  };
  const bool hub_id =
      slash != std::string::npos && slash > 0 && slash + 1 < path.size() &&
      path.find('/', slash + 1) == std::string::npos && path[0] != '.' &&
      std::all_of(path.begin(), path.end(), [&](char c) { return c == '/' || name_char(c); });
  const bool file_name = path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  std::error_code ec;
  if (!hub_id || file_name || std::filesystem::exists(path, ec) ||
      std::filesystem::exists(path.substr(0, slash), ec))
    return "";
  return " (a Hugging Face Hub id? Hub ids are not downloaded: `hf download " + path +
         " --local-dir DIR` fetches it, then give DIR)";
}

std::string did_you_mean(const std::string& given, const po::options_description& options) {
  std::vector<std::string> all, names;  // names: those `given` begins, else the closest
  for (const auto& option : options.options()) {
    const std::string& name = option->long_name();
    if (name.empty()) continue;
    all.push_back(name);
    if (name.rfind(given, 0) == 0) names.push_back(name);
  }
  const std::string hint = hugging_face_name_hint(given, all);
  if (!hint.empty()) return hint;
  if (names.empty()) names.push_back(closest_name(given, all));
  if (names.front().empty()) return "";
  std::string text = " (did you mean ";
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + ("--" + names[i]);
  return text + "?)";
}

po::typed_value<bool>* bool_flag(bool* target, bool fallback) {
  return po::value<bool>(target)->default_value(fallback)->implicit_value(true);
}

void add_comm_timeout_option(po::options_description& options, double* seconds) {
  options.add_options()("comm-timeout", decimal_option(seconds),
                        "seconds a collective may wait before the job ends with a report naming "
                        "the rank, the operation and the step (0 or inf: no timeout)");
}

namespace {

constexpr WordChoice<AutoSwitch> kAutoSwitchWords[] = {
    {AutoSwitch::kAuto, "auto"}, {AutoSwitch::kOn, "on"}, {AutoSwitch::kOff, "off"}};

}  // namespace

AutoSwitch parse_auto_switch(const std::string& text, const std::string& option) {
  return parse_word(text, kAutoSwitchWords, option);
}

const char* auto_switch_name(AutoSwitch value) {
  return word_of(value, kAutoSwitchWords);
}

po::value_semantic* auto_switch_option(AutoSwitch* target, const std::string& option) {
  return word_option<AutoSwitch>(
      target, [option](const std::string& text) { return parse_auto_switch(text, option); },
      auto_switch_name(*target));
}

int64_t parse_eval_batches(const std::string& text, const std::string& option) {
  if (text == "all") return kAllEvalBatches;
  int64_t count = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, count);
  ZT_CHECK(!text.empty() && std::isdigit(static_cast<unsigned char>(text[0])) &&
               error == std::errc() && stop == end,
           option + " takes a count of batches (0 or more) or 'all', got '" + text + "'");
  return count;
}

std::string eval_batches_name(int64_t batches) {
  return batches == kAllEvalBatches ? "all" : std::to_string(batches);
}

po::value_semantic* eval_batches_option(int64_t* target, const std::string& option) {
  return word_option<int64_t>(
      target, [option](const std::string& text) { return parse_eval_batches(text, option); },
      eval_batches_name(*target));
}

po::value_semantic* precision_option(Precision* target) {
  return word_option<Precision>(
      target,
      [](const std::string& text) {
        try {
          return parse_precision(text);
        } catch (const Error& e) {
          throw Error(std::string("--precision: ") + e.what());
        }
      },
      precision_name(*target));
}

po::value_semantic* backend_option(BackendRequest* target) {
  return word_option<BackendRequest>(target, parse_backend_request, backend_request_name(*target));
}

void add_attention_option(po::options_description& options, AttentionRequest* value) {
  options.add_options()(
      "attention",
      word_option<AttentionRequest>(value, parse_attention_request, attention_request_name(*value)),
      "CUDA attention: gemm (GEMMs + row kernels in fp32) | fused (cuDNN SDPA on bf16 inputs) | "
      "auto (the default: fused where built, supported and accepted by cuDNN at start-up, unless "
      "--precision fp32 or document masks, not yet validated on the fused path; else gemm)");
}

void add_deterministic_option(po::options_description& options, bool* value) {
  options.add_options()(
      "deterministic", bool_flag(value, *value),
      "true: the same config and seed give the same bits on every run | false: the CUDA "
      "backend may use faster kernels whose low bits vary from run to run (today the fused "
      "attention's backward, dQ summed with atomics; docs/reproducibility.md)");
}

void add_document_masking_option(po::options_description& options, AutoSwitch* value) {
  options.add_options()("document-masking", auto_switch_option(value, "--document-masking"),
                        "auto | on | off: a packed document attends only to its own earlier "
                        "tokens, its positions restart at 0 and its first token is not a target "
                        "of the document before it (auto: on when the dataset records more than "
                        "one document; off: plain causal attention over the window)");
}

bool resolve_document_masking(AutoSwitch mode, int64_t documents, const std::string& data_path,
                              const std::string& command) {
  ZT_CHECK(mode != AutoSwitch::kOn || documents > 0,
           command + ": --document-masking on: token dataset '" + data_path +
               "' records no document boundaries (/doc_starts); make it again with this "
               "version's prepare-data, or use --document-masking off");
  return mode == AutoSwitch::kOn || (mode == AutoSwitch::kAuto && documents > 1);
}

void add_activations_option(po::options_description& options, DType* value) {
  options.add_options()(
      "activations",
      word_option<DType>(
          value,
          [](const std::string& text) { return parse_activation_storage(text, "--activations"); },
          std::string("by precision and backend")),
      "storage type of activations and their gradients: fp32 | bf16 (needs "
      "--precision bf16; its default on the CUDA backend) | fp16 (needs "
      "--precision fp16; its default); statistics stay fp32");
}

void default_activations(const po::variables_map& vm, Precision precision, BackendKind backend,
                         DType* activations) {
  if (vm.count("activations") && !vm["activations"].defaulted()) return;
  *activations = default_activation_storage(precision, backend);
}

DType default_activation_storage(Precision precision, BackendKind backend) {
  if (precision == Precision::kFp16) return DType::kFloat16;
  return precision == Precision::kBf16 && backend == BackendKind::kCuda ? DType::kBf16
                                                                        : DType::kFloat32;
}

void add_trainable_options(po::options_description& options, std::vector<std::string>* trainable,
                           std::vector<std::string>* freeze) {
  options.add_options()("trainable", po::value(trainable),
                        "train only the tensors whose Hugging Face name matches this regular "
                        "expression (searched, as Python's re.search; repeatable); the rest are "
                        "frozen, like requires_grad=False")(
      "freeze", po::value(freeze),
      "freeze the tensors whose name matches this regular expression (repeatable; applied "
      "after --trainable)");
}

void check_comm_timeout(double seconds, const std::string& command) {
  ZT_CHECK(seconds >= 0, command +
                             ": --comm-timeout must be >= 0 seconds (0 or inf: no "
                             "timeout), got " +
                             shortest_decimal(seconds));
}

void require_option(const po::variables_map& vm, const std::string& name,
                    const std::string& command) {
  ZT_CHECK(vm.count(name) > 0, command + ": missing required option '--" + name + "'");
}

void check_output_dir(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  ZT_CHECK(!path.empty(), "the output path is empty (--out '')");
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    fail("output path '" + path + "' exists and is not a directory");
  if (fs::is_directory(path, ec) && !run_directory_is_empty(path) && !overwrite)
    fail("output directory '" + path + "' exists and is not empty (use --overwrite)");
}

}  // namespace zt

// zerotrain generate: continues a prompt with a model directory on one process (CPU backend):
// greedy, or sampled with temperature / top-k / top-p as Hugging Face's generate() samples
// (model/token_sampling.h), decoding with the model's tokenizer (the tokenizer.json that train,
// import and export keep beside the weights, or --tokenizer) or bytes (--tokenizer byte). The
// prompt runs through the model once and each new token alone after it, over a cache of every
// earlier position's keys and values (model/kv_cache_decoder.h). With --adapter, a PEFT LoRA
// adapter directory merged into the model's weights in fp32 (io/lora_merge.h).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/commands.h"
#include "app/lora_options.h"
#include "app/python_step.h"
#include "app/run_setup.h"
#include "backend/backend.h"
#include "io/data_loader.h"
#include "io/fs_util.h"
#include "io/lora_merge.h"
#include "io/model_dir.h"
#include "io/tokenizer_files.h"
#include "model/kv_cache_decoder.h"
#include "model/token_sampling.h"
#include "util/error.h"
#include "util/memory.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

const char* const kCommand = "generate";

// The Python step of a Hugging Face tokenizer. argv: mode (encode | chat | conversation |
// decode), tokenizer.json or a directory holding it, input file, output file, chat template name
// (empty: as transformers picks, "tool_use" when there are tools and such a template, else
// "default"; a single template is named "default", as transformers 5 saves it), tools file
// (empty: none), system message file (empty: none), chat template file (--chat-template-file's
// text, read and checked by io/tokenizer_files.h; empty: the tokenizer's templates). encode: the
// input's UTF-8 text as the tokenizer encodes a document (its BOS, ...); chat: the input as the
// user's message, after the system message when there is one; conversation: the input a JSON list
// of messages (the last not the assistant's); chat and conversation render the messages with that
// chat template, the tools and the generation prompt, and encode them as
// apply_chat_template(tokenize=True) does; each -> {"ids": [...], "eos_token_id": ID or -1,
// "turn_end_id": ID or -1} (the token that closes the assistant's turn in that template, when
// the tokenizer adds it whole; -1 for encode). decode: {"ids": [...]} -> the text, special tokens
// skipped. It follows the opening of app/python_step.h.
constexpr const char* kTokenizerStep = R"PY(
def read_text(path, what):
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except UnicodeDecodeError as e:
        sys.exit(f"{what} is not UTF-8 text: {e}")

def read_json(path, option):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        sys.exit(f"{option}: {path}: not a UTF-8 JSON file: {e}")

def conversation(path):
    messages = read_json(path, "--messages")
    if (not isinstance(messages, list) or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)):
        sys.exit(f"--messages: {path}: not a non-empty list of messages, each an object with a "
                 "'role' (and its 'content'), as apply_chat_template takes them")
    if messages[-1]["role"] == "assistant":
        sys.exit(f"--messages: {path}: the conversation ends with an assistant message; generate "
                 "writes the next assistant turn, after a user (or tool) message")
    return messages

def chosen_template():
    """(the chat template --chat and --messages render with, the tools it is given)."""
    if not tok.chat_template and not template_path:
        sys.exit(f"{os.path.join(tok_dir, 'tokenizer_config.json')}: no chat_template "
                 "(and no chat_template.jinja beside it): --chat and --messages need one; give "
                 "the text to continue with --prompt")
    tools = None
    if tools_path:
        tools = read_json(tools_path, "--tools")
        if not isinstance(tools, list) or any(call_name(t) is None for t in tools):
            sys.exit(f"--tools: {tools_path}: not a list of tool schemas that each name a "
                     'function ({"type": "function", "function": {"name", "parameters"}})')
        tools = tools or None  # an empty list is no tools, as chat SFT data reads it
    named = tok.chat_template
    if template_path:  # --chat-template-file: this template in place of the tokenizer's
        named = read_text(template_path, "--chat-template-file")
    if not isinstance(named, dict):
        named = {"default": named}
    names = ", ".join(sorted(named))
    name = template_name or ("tool_use" if tools and "tool_use" in named else "default")
    if name not in named and template_name:
        sys.exit(f"--chat-template: {tok_dir} has no chat template named {name!r}; its "
                 f"templates are named {names}")
    if name not in named:
        sys.exit(f"{tok_dir}: the chat templates are named {names}, none 'default', which "
                 f"--chat renders a message {'with tools ' if tools else ''}with when none "
                 "is named 'tool_use' (--chat-template NAME picks one)")
    return named[name], tools

def turn_end_id(messages, template, tools):
    """The token that closes the assistant turn the template renders after the messages, when
    it is one the tokenizer adds whole (<|im_end|>, <|eot_id|>, <|end|>, Gemma's <end_of_turn>,
    which its config does not mark special; after whitespace, as Llama 2's " </s>"); -1 when
    the turn closes with plain text, or the template renders no such turn (said on stderr when
    it raises)."""
    probe = "zerotrain-reply-probe"
    try:
        closed = tok.apply_chat_template(messages + [{"role": "assistant", "content": probe}],
                                         tools=tools, tokenize=False, chat_template=template)
    except Exception as e:  # a template that raises on a closed turn has none to read
        print(f"generate: warning: the chat template raised rendering a closed assistant turn "
              f"({type(e).__name__}: {e}); the reply stops at the EOS ids alone",
              file=sys.stderr)
        return -1
    at = closed.rfind(probe)
    closing = closed[at + len(probe):].lstrip() if at >= 0 else ""
    ids = tok(closing, add_special_tokens=False)["input_ids"] if closing else []
    return ids[0] if ids and ids[0] in tok.added_tokens_decoder else -1

def chat_prompt(messages):
    """The messages rendered with the generation prompt, and the token that ends the reply."""
    template, tools = chosen_template()
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                   add_generation_prompt=True, chat_template=template)
    return text, turn_end_id(messages, template, tools)

if mode == "decode":
    with open(in_path, encoding="utf-8") as f:
        ids = json.load(f)["ids"]
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(tok.decode(ids, skip_special_tokens=True))
else:
    if mode == "encode":
        text, turn_end = read_text(in_path, "the prompt"), -1
    elif mode == "chat":
        system = ([{"role": "system", "content": read_text(system_path, "--system")}]
                  if system_path else [])
        text, turn_end = chat_prompt(
            system + [{"role": "user", "content": read_text(in_path, "the message")}])
    else:
        text, turn_end = chat_prompt(conversation(in_path))
    ids = tok(text, add_special_tokens=mode == "encode")["input_ids"]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"ids": ids, "eos_token_id": special_id("eos_token"),
                   "turn_end_id": turn_end}, f)
)PY";

struct GenerateOptions {
  std::string model_dir, prompt, chat, tokenizer, python = default_python();
  std::string adapter;        // --adapter: a PEFT LoRA adapter directory merged into the model
  std::string chat_template;  // --chat-template: the named template --chat renders (empty: auto)
  std::string chat_template_file;  // --chat-template-file: a Jinja template rendered instead
  std::string tools;               // --tools: a JSON file of tool definitions for the chat template
  std::string system;              // --system: the system message before --chat's (has_system)
  std::string messages;            // --messages: a JSON file holding the conversation to continue
  int64_t max_new_tokens = 64;
  SamplingConfig sampling;
  int64_t seed = 0;
  bool ignore_eos = false, json = false;
  bool has_system = false;  // --system given (an empty one is an empty system message)
  bool chat_mode = false;   // --chat or --messages given: a chat template renders the prompt
};

// A prompt's token ids, the tokenizer's EOS id and the id that closes an assistant's turn in the
// chat template (-1: none).
struct EncodedPrompt {
  std::vector<int32_t> ids;
  int64_t eos = -1, turn_end = -1;
};

// The prompt's token ids and the ids that end generation, and the text of new ids.
class PromptTokenizer {
 public:
  PromptTokenizer(const GenerateOptions& o, const std::string& scratch)
      : o_(o), scratch_(scratch), byte_(o.tokenizer == "byte") {
    if (byte_) return;
    if (!o.chat_template_file.empty()) {  // as prepare-data reads it: Python's newlines, checked
      template_file_ = scratch_ + "/chat_template.jinja";
      write_text_file(template_file_, read_chat_template_file(o.chat_template_file));
    }
    path_ = !o.tokenizer.empty() ? o.tokenizer
            : o.adapter.empty()  ? o.model_dir
                                 : merged_model_tokenizer_dir(o.model_dir, o.adapter);
    const std::string file = fs::is_directory(path_) ? path_ + "/tokenizer.json" : path_;
    ZT_CHECK(
        fs::is_regular_file(file),
        o.tokenizer.empty()
            ? "model '" + o.model_dir +
                  "' carries no tokenizer.json: give --tokenizer PATH (a tokenizer.json or its "
                  "directory), or --tokenizer byte for a model trained on `prepare-data "
                  "--text` data"
            : "tokenizer '" + file + "' does not exist" + hub_id_hint(o.tokenizer));
  }

  // The prompt's ids: --prompt as a document, or --chat's message (after --system's) or
  // --messages' conversation in the chat template with its generation prompt.
  EncodedPrompt encode() {
    ZT_CHECK(!(byte_ && o_.chat_mode),
             "--chat and --messages need a Hugging Face tokenizer with a chat template, not "
             "--tokenizer byte");
    if (byte_) {
      EncodedPrompt byte_prompt;  // each byte as unsigned char, 0..255 (UTF-8 above 127 too)
      for (const char c : o_.prompt) byte_prompt.ids.push_back(static_cast<unsigned char>(c));
      return byte_prompt;
    }
    const std::string encoded_path = scratch_ + "/encoded.json";
    if (!o_.messages.empty()) {
      step("conversation", o_.messages, encoded_path);
    } else {
      write_text_file(scratch_ + "/prompt.txt", o_.chat_mode ? o_.chat : o_.prompt);
      if (o_.has_system) write_text_file(scratch_ + "/system.txt", o_.system);
      step(o_.chat_mode ? "chat" : "encode", scratch_ + "/prompt.txt", encoded_path,
           o_.has_system ? scratch_ + "/system.txt" : "");
    }
    const nlohmann::json encoded = read_json_file(encoded_path);
    return {encoded.at("ids").get<std::vector<int32_t>>(),
            encoded.at("eos_token_id").get<int64_t>(), encoded.at("turn_end_id").get<int64_t>()};
  }

  std::string decode(const std::vector<int32_t>& ids) {
    if (byte_) {
      std::string text;
      for (int32_t id : ids) text.push_back(static_cast<char>(id));
      return text;
    }
    write_text_file(scratch_ + "/ids.json", nlohmann::json{{"ids", ids}}.dump());
    step("decode", scratch_ + "/ids.json", scratch_ + "/decoded.txt");
    std::ifstream in(scratch_ + "/decoded.txt", std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

 private:
  void step(const std::string& mode, const std::string& in, const std::string& out,
            const std::string& system = "") {
    run_tokenizer_step(o_.python,
                       "mode, tok_path, in_path, out_path, template_name, tools_path, system_path, "
                       "template_path",
                       kTokenizerStep,
                       {mode, path_, in, out, o_.chat_template, o_.tools, system, template_file_});
  }
  static void write_text_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    ZT_CHECK(out.good(), "cannot write '" + path + "'");
  }

  const GenerateOptions& o_;
  std::string scratch_, path_, template_file_;
  bool byte_;
};

// generation_config.json's eos_token_id (a number or a list of them; generation stops at any),
// empty when absent.
std::vector<int64_t> generation_config_eos(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  if (!fs::is_regular_file(path)) return {};
  const nlohmann::json j = read_json_file(path);
  const auto it = j.find("eos_token_id");
  std::vector<int64_t> ids;
  if (it == j.end()) return ids;
  for (const nlohmann::json& id : it->is_array() ? *it : nlohmann::json::array({*it}))
    if (id.is_number_integer()) ids.push_back(id.get<int64_t>());
  return ids;
}
void add_generate_options(po::options_description& opts, GenerateOptions& o) {
  auto add = opts.add_options();
  add("model", po::value(&o.model_dir), "model directory");
  add("adapter", po::value(&o.adapter),
      "a PEFT LoRA adapter directory (a LoRA run's OUT/final, or one PEFT saved with "
      "safetensors) for --model, merged into its weights in fp32 as PEFT's merge_and_unload");
  add("prompt", po::value(&o.prompt), "the text to continue");
  add("chat", po::value(&o.chat),
      "a user message: the model's chat template renders it with the generation prompt, and the "
      "reply is printed (it ends at the end-of-sequence token or at the token that closes the "
      "assistant's turn in the template)");
  add("system", po::value(&o.system),
      "with --chat: a system message before the user's (without it, the chat template's own "
      "default, if it has one)");
  add("messages", po::value(&o.messages),
      "instead of --chat: a JSON file holding the conversation to continue, a list of messages "
      "({\"role\", \"content\"}, tool calls and results as a chat template reads them) that ends "
      "with a user or tool message; the reply is the next assistant turn");
  add("chat-template", po::value(&o.chat_template),
      "with --chat or --messages: the name of the tokenizer's chat template that renders the "
      "messages (default: tool_use when --tools gives tools and there is one, else default, as "
      "transformers picks; a single template is named default)");
  add("chat-template-file", po::value(&o.chat_template_file),
      "with --chat or --messages: a Jinja chat template file rendered instead of the tokenizer's "
      "templates (a base model's; as prepare-data --chat-template-file)");
  add("tools", po::value(&o.tools),
      "with --chat or --messages: a JSON file holding a list of tool schemas that the chat "
      "template renders, as apply_chat_template(tools=...); an empty list is no tools");
  add("max-new-tokens", po::value(&o.max_new_tokens)->default_value(o.max_new_tokens),
      "tokens to generate at most (fewer at EOS or at the model's longest sequence)");
  add("do-sample", bool_flag(&o.sampling.sample, false),
      "sample (temperature, top-k, top-p) instead of the greedy choice");
  add("temperature", decimal_option(&o.sampling.temperature), "divides the logits (sampling)");
  add("top-k", po::value(&o.sampling.top_k)->default_value(50),
      "sample among the k most likely tokens (0: all)");
  add("top-p", decimal_option(&o.sampling.top_p),
      "sample among the fewest most likely tokens holding this much probability (1: all)");
  add("seed", po::value(&o.seed)->default_value(o.seed), "seed of the sampling");
  add("tokenizer", po::value(&o.tokenizer),
      "tokenizer.json or its directory (default: --adapter's when it holds one, as a LoRA run's "
      "OUT/final does, else the model's), or 'byte'");
  add("python", po::value(&o.python)->default_value(o.python, "auto"), kPythonOptionHelp);
  add("ignore-eos", bool_flag(&o.ignore_eos, false),
      "do not stop at the end-of-sequence token (nor, in a chat, at the end-of-turn token)");
  add("json", bool_flag(&o.json, false),
      "print one JSON line (prompt and new token ids, the new text, finish_reason: stop at an "
      "end token, length at the limit) instead of the text");
}

void check_generate_options(const po::variables_map& vm, GenerateOptions& o) {
  require_option(vm, "model", kCommand);
  check_adapter_option(vm, o.adapter, kCommand);
  ZT_CHECK(vm.count("prompt") + vm.count("chat") + vm.count("messages") == 1,
           "generate: give exactly one of '--prompt', '--chat' or '--messages'");
  o.chat_mode = vm.count("chat") + vm.count("messages") > 0;
  o.has_system = vm.count("system") > 0;
  for (const char* chat_only : {"chat-template", "chat-template-file", "tools"})
    ZT_CHECK(o.chat_mode || vm.count(chat_only) == 0,
             std::string("generate: --") + chat_only +
                 " goes with a --chat message or --messages (the chat template renders them); "
                 "--prompt continues a text as it is");
  ZT_CHECK(!o.has_system || vm.count("chat"),
           "generate: --system goes with a --chat message (--messages holds its own system "
           "message; --prompt continues a text as it is)");
  ZT_CHECK(vm.count("chat-template") == 0 || !o.chat_template.empty(),
           "generate: --chat-template needs a template's name");
  ZT_CHECK(vm.count("chat-template") + vm.count("chat-template-file") < 2,
           "generate: give --chat-template (a template of the tokenizer, by name) or "
           "--chat-template-file (a template of your own), not both");
  ZT_CHECK(vm.count("chat-template-file") == 0 || !o.chat_template_file.empty(),
           "generate: --chat-template-file needs the path of a Jinja file");
  for (const auto& [option, file] : {std::pair{"tools", &o.tools}, {"messages", &o.messages}})
    ZT_CHECK(vm.count(option) == 0 || fs::is_regular_file(*file),
             std::string("generate: --") + option + " '" + *file + "' is not a file");
  check_count(o.max_new_tokens, 1, "max-new-tokens", kCommand);
  check_sampling_config(o.sampling);
  ZT_CHECK(o.seed >= 0,
           std::string(kCommand) + ": --seed must be >= 0, got " + std::to_string(o.seed));
}

bool parse_generate_options(int argc, char** argv, GenerateOptions& o) {
  po::options_description opts("generate options");
  add_generate_options(opts, o);
  const CommandSpec spec{
      kCommand, "Continue a prompt with a model (one process, CPU): greedy or sampled.",
      "zerotrain generate --model DIR [--adapter DIR] (--prompt TEXT | --chat MESSAGE "
      "[--system TEXT] | --messages FILE) [--tools FILE] [--chat-template NAME] "
      "[--max-new-tokens N] [--do-sample --temperature T --top-k K --top-p P --seed S]"};
  po::variables_map vm;
  if (!parse_command_line(spec, opts, nullptr, argc, argv, vm)) return false;
  check_generate_options(vm, o);
  return true;
}

// The ids generation stops at: generation_config.json's EOS ids (the merged model's: the adapter
// directory's where it holds the tokenizer and that file, else the base's; the base's when that
// one names none), else the tokenizer's EOS; and in a chat, the token that closes the
// assistant's turn in the template, which a generation_config may leave out (CodeGemma's names
// <eos> alone, its turns close with <end_of_turn>) and a base model trained on a chat template
// lacks (its EOS <|endoftext|>, ChatML's turns closed by <|im_end|>).
std::vector<int64_t> stop_ids(const GenerateOptions& o, const EncodedPrompt& prompt) {
  const std::string generation_dir =
      o.adapter.empty() ? o.model_dir : merged_model_generation_config_dir(o.model_dir, o.adapter);
  std::vector<int64_t> stops = generation_config_eos(generation_dir);
  if (stops.empty() && generation_dir != o.model_dir) stops = generation_config_eos(o.model_dir);
  if (stops.empty() && prompt.eos >= 0) stops.push_back(prompt.eos);
  if (prompt.turn_end >= 0 && std::find(stops.begin(), stops.end(), prompt.turn_end) == stops.end())
    stops.push_back(prompt.turn_end);
  return stops;
}

// The new tokens after the prompt (`context`), until one of `stops` (unless --ignore-eos), the
// T-th position or --max-new-tokens; `*stopped`: whether a stop id ended them (it is the last).
// The weights as stored, in fp32; a cache of T positions, the prompt the longest forward.
std::vector<int32_t> new_tokens(const GenerateOptions& o, TensorSource& weights,
                                const std::vector<int32_t>& context, int64_t T,
                                const std::vector<int64_t>& stops, bool* stopped) {
  const ModelConfig& config = weights.config();
  const auto prompt_length = static_cast<int64_t>(context.size());
  std::unique_ptr<Backend> backend = make_cpu_backend();
  MemoryTracker memory(backend->device_memory());
  KvCacheDecoder decoder(config, *backend, memory, T, prompt_length);
  const ParamLayout& layout = decoder.layout();
  std::vector<TrackedBuffer<float>> params;
  std::vector<ConstTensorView> views;
  for (const GroupInfo& group : layout.groups()) {
    params.emplace_back(memory, MemCategory::kParams, static_cast<size_t>(group.numel));
    for (int ti : group.tensors) {
      const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
      weights.read_range_f32(t, 0, t.numel, params.back().data() + t.offset);
    }
    views.emplace_back(params.back().data());
  }
  SplitMix64 rng(static_cast<uint64_t>(o.seed));
  const int64_t V = config.vocab_size;
  std::vector<int32_t> generated;
  std::vector<float> row = decoder.forward(context.data(), prompt_length, views);
  *stopped = false;
  while (true) {
    const double u = static_cast<double>(rng.next() >> 11) * 0x1p-53;
    const int32_t next = o.sampling.sample
                             ? draw_token(sampling_distribution(row.data(), V, o.sampling), u)
                             : greedy_token(row.data(), V);
    generated.push_back(next);
    *stopped = !o.ignore_eos && std::find(stops.begin(), stops.end(), next) != stops.end();
    if (*stopped || prompt_length + static_cast<int64_t>(generated.size()) == T) break;
    row = decoder.forward(&generated.back(), 1, views);
  }
  return generated;
}

int run_generate(const GenerateOptions& o) {
  std::unique_ptr<TensorSource> weights;
  if (o.adapter.empty())
    weights = std::make_unique<ModelDirReader>(o.model_dir);
  else
    weights = std::make_unique<LoraMergedSource>(o.model_dir, o.adapter);
  const ModelConfig& config = weights->config();
  const ScratchDir scratch(fs::temp_directory_path() /
                           ("zerotrain-generate-" + std::to_string(::getpid())));
  PromptTokenizer tokenizer(o, scratch.path());
  ZT_CHECK(o.tokenizer != "byte" || config.vocab_size <= 256,
           "--tokenizer byte decodes ids below 256; model '" + o.model_dir + "' has vocab_size " +
               std::to_string(config.vocab_size) + " (give its tokenizer: --tokenizer PATH)");
  const EncodedPrompt prompt = tokenizer.encode();
  const std::vector<int32_t>& prompt_ids = prompt.ids;
  ZT_CHECK(!prompt_ids.empty(), "the prompt encodes to no token");
  for (int32_t id : prompt_ids)
    ZT_CHECK(id >= 0 && id < config.vocab_size,
             "prompt token " + std::to_string(id) + " is outside the vocabulary (" +
                 std::to_string(config.vocab_size) + ") of model '" + o.model_dir + "'");
  const auto prompt_length = static_cast<int64_t>(prompt_ids.size());
  const int64_t T = std::min(prompt_length + o.max_new_tokens, config.max_positions());
  ZT_CHECK(prompt_length < T, "the prompt has " + std::to_string(prompt_length) +
                                  " tokens; the model's " + config.max_positions_text());
  bool stopped = false;
  const std::vector<int32_t> generated =
      new_tokens(o, *weights, prompt_ids, T, stop_ids(o, prompt), &stopped);
  // The text: the sequence decoded without the stop token (a turn's end the tokenizer does not
  // mark special, as Gemma's <end_of_turn>, would be printed), then the prompt's own decoding
  // taken off: a decoder that drops the first token's leading space (SentencePiece's) keeps the
  // space between the two parts.
  std::vector<int32_t> shown(prompt_ids);
  shown.insert(shown.end(), generated.begin(), generated.end() - (stopped ? 1 : 0));
  const std::string whole = tokenizer.decode(shown), head = tokenizer.decode(prompt_ids);
  const std::string text =
      whole.compare(0, head.size(), head) == 0
          ? whole.substr(head.size())
          : tokenizer.decode(std::vector<int32_t>(shown.begin() + prompt_length, shown.end()));
  if (o.json) {
    // finish_reason as OpenAI's API and vLLM name it: "stop" at a stop id, else "length".
    std::cout << nlohmann::json{{"prompt_tokens", prompt_ids},
                                {"new_tokens", generated},
                                {"text", text},
                                {"finish_reason", stopped ? "stop" : "length"}}
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << std::endl;
  } else {
    // A chat prints the reply alone; a prompt is printed with its continuation.
    std::cout << (o.chat_mode ? "" : head) << text << std::endl;
  }
  return 0;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  GenerateOptions options;
  if (!parse_generate_options(argc, argv, options)) return 0;
  return run_generate(options);
}

}  // namespace zt

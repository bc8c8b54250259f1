// zerotrain prepare-data: builds an HDF5 token dataset from text files, llm.c .bin shards,
// nanoGPT's headerless .bin files, or (with a Hugging Face tokenizer) text, JSON-lines documents
// and SFT examples with a loss mask.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "app/cli.h"
#include "app/commands.h"
#include "app/hf_tokenize.h"
#include "app/python_step.h"
#include "io/fs_util.h"
#include "io/token_dataset.h"
#include "runtime/signals.h"
#include "util/error.h"

namespace zt {

namespace {

po::options_description prepare_data_options() {
  po::options_description options("prepare-data options");
  options.add_options()("text", po::value<std::vector<std::string>>()->multitoken(),
                        "UTF-8 text files (byte-level tokens; with --tokenizer, its tokens, "
                        "and the files may be compressed by gzip, bzip2, xz or zstd)")(
      "bin", po::value<std::vector<std::string>>()->multitoken(),
      "llm.c .bin files (magic 20240520: GPT-2, 20240801: Llama 3)")(
      "nanogpt-bin", po::value<std::vector<std::string>>()->multitoken(),
      "nanoGPT's headerless uint16 .bin files (needs --vocab-size)")(
      "tokenizer", po::value<std::string>(),
      "Hugging Face tokenizer.json, or a directory holding it, for --text or --jsonl")(
      "jsonl", po::value<std::vector<std::string>>()->multitoken(),
      "JSON-lines files, one document per line, files holding one JSON array of them, "
      "Parquet files, one document per row, as the Hugging Face Hub stores datasets, or "
      "directories datasets' save_to_disk wrote (and its Arrow files); JSON may be compressed by "
      "gzip, bzip2, xz or zstd (with --tokenizer)")(
      "text-field", po::value<std::string>()->default_value("text"),
      "the field of each JSON line that holds its text")(
      "sft-jsonl", po::value<std::vector<std::string>>()->multitoken(),
      "JSON-lines files of SFT examples, a prompt and a response per line, files holding one "
      "JSON array of them, as Alpaca's alpaca_data.json, Parquet files of them, one per row, or "
      "saved datasets (as --jsonl); JSON may be compressed (with --tokenizer): the dataset gets "
      "a loss mask so that only the responses are learned")(
      "prompt-field", po::value<std::string>()->default_value("prompt"),
      "the field of each --sft-jsonl line that holds the prompt: a string, or with "
      "--chat-template a list of messages (TRL's conversational prompt-completion); or fields "
      "separated by commas (Alpaca's instruction,input), whose texts that are not empty are "
      "joined by a newline, as LLaMA-Factory joins them")(
      "response-field", po::value<std::string>()->default_value("response"),
      "the field of each --sft-jsonl line that holds the response (TRL names it completion): a "
      "string, or a list of messages as the prompt is; only the response is learned")(
      "chat-template", po::bool_switch(),
      "render each --sft-jsonl example with the tokenizer's chat template (transformers)")(
      "chat-template-file", po::value<std::string>(),
      "render with this Jinja chat template instead of the tokenizer's, as TRL's "
      "chat_template_path (for a base model without one); implies --chat-template, and the "
      "dataset's tokenizer files, so the trained model's, carry it")(
      "messages-field", po::value<std::string>(),
      "the field of each --sft-jsonl line that holds a conversation, a list of {role: "
      "system|user|assistant|tool, content[, tool_calls]}, or ShareGPT's {from, value} "
      "(conversations in LLaMA-Factory and axolotl) (with --chat-template): every assistant "
      "turn is learned")(
      "tools-field", po::value<std::string>()->default_value("tools"),
      "the field of each --sft-jsonl line that lists the tools the chat template is given (TRL's "
      "tools column: JSON schemas, or a string holding them), when the line has it")(
      "system-field", po::value<std::string>(),
      "the field of each --sft-jsonl line that holds a system prompt (LLaMA-Factory's system "
      "column, OpenOrca's system_prompt) (with --chat-template): it opens the conversation as a "
      "system message, unless the conversation opens with one; absent, null or empty adds none")(
      "chat-end-token", po::value<std::string>()->default_value("auto"),
      "auto | off | TOKEN: the token appended after each conversation's last reply, and "
      "counted, when the chat template writes nothing but whitespace after it (GLM's), so that "
      "the model learns to stop (auto: the tokenizer's EOS, as LLaMA-Factory appends it; TOKEN: "
      "one the tokenizer holds whole, as GLM's <|user|>)")(
      "history-field", po::value<std::string>(),
      "the field of each --sft-jsonl prompt/response line that lists the turns before its "
      "prompt, [prompt, response] pairs (LLaMA-Factory's alpaca history) (with --chat-template): "
      "each pair is a user and an assistant turn, and its response is learned")(
      "document-eos", po::value<std::string>()->default_value("auto"),
      "auto | on | off: end each --text or --jsonl document with the tokenizer's EOS, as TRL "
      "ends a text example and torchtitan a document, unless it ends with it (auto: when the "
      "tokenizer names an eos_token; off: tokenizer(text) alone, as transformers' run_clm.py)")(
      "workers", po::value<int>()->default_value(1),
      "processes that tokenize and render the documents, as datasets' map(num_proc=N) (with "
      "--tokenizer); the dataset is the same whatever the count")(
      "python", po::value<std::string>()->default_value(default_python(), "auto"),
      kPythonOptionHelp)("out", po::value<std::string>(), "output token dataset (.h5)")(
      "vocab-size", po::value<int64_t>()->default_value(0),
      "vocabulary size (default: the llm.c header's tokenizer, 50257 or 128256)")(
      "tokenizer-label", po::value<std::string>()->default_value(""),
      "the tokenizer the dataset is labelled with (default: byte, gpt2, llama3, or unknown for "
      "nanoGPT files)")("overwrite", po::bool_switch(), "replace an existing output file");
  return options;
}

// --chat-template, or --chat-template-file, which implies it.
bool renders_chat_template(const po::variables_map& vm) {
  return vm["chat-template"].as<bool>() || vm.count("chat-template-file") > 0;
}

// The fields --sft-jsonl reads: named, and no field for two things. --prompt-field may name
// several (Alpaca's instruction,input), joined into the prompt.
void check_sft_fields(const SftFields& f, bool messages_given) {
  ZT_CHECK(!messages_given || !f.messages.empty(),
           "prepare-data: --messages-field must name the JSON field that holds each conversation");
  std::vector<std::string> prompt = split_commas(f.prompt);
  for (size_t i = 0; i < prompt.size(); ++i) {
    ZT_CHECK(!prompt[i].empty(), "prepare-data: --prompt-field '" + f.prompt +
                                     "' names an empty field (give one field, or several "
                                     "separated by commas: instruction,input)");
    ZT_CHECK(std::find(prompt.begin(), prompt.begin() + i, prompt[i]) == prompt.begin() + i,
             "prepare-data: --prompt-field names '" + prompt[i] + "' twice");
  }
  const bool in_prompt = std::find(prompt.begin(), prompt.end(), f.response) != prompt.end();
  ZT_CHECK(!f.response.empty() && !in_prompt,
           "prepare-data: --prompt-field and --response-field must name different JSON fields");
  ZT_CHECK(!f.tools.empty() && f.tools != f.messages && f.tools != f.response &&
               std::find(prompt.begin(), prompt.end(), f.tools) == prompt.end(),
           "prepare-data: --tools-field must name the JSON field that lists each line's tools, "
           "not one that holds the examples");
  // The fields the examples are read from: the conversation, or the prompt's and the response.
  std::vector<std::string> taken = f.messages.empty() ? prompt : std::vector{f.messages};
  if (f.messages.empty()) taken.push_back(f.response);
  taken.push_back(f.tools);
  for (const auto& [option, field] :
       {std::pair{"--system-field", f.system}, std::pair{"--history-field", f.history}}) {
    if (field.empty()) continue;
    ZT_CHECK(std::find(taken.begin(), taken.end(), field) == taken.end(),
             std::string("prepare-data: ") + option + " names '" + field +
                 "', a field another option reads");
    taken.push_back(field);
  }
}

// The one kind of input, and the options that go with it.
void check_input_options(const po::variables_map& vm) {
  const bool sft = vm.count("sft-jsonl") > 0;
  ZT_CHECK(vm.count("text") + vm.count("bin") + vm.count("nanogpt-bin") + vm.count("jsonl") +
                   vm.count("sft-jsonl") ==
               1,
           "prepare-data: give exactly one of '--text', '--jsonl', '--sft-jsonl', '--bin' and "
           "'--nanogpt-bin'");
  ZT_CHECK(sft || (vm["prompt-field"].defaulted() && vm["response-field"].defaulted() &&
                   !renders_chat_template(vm) && !vm.count("messages-field")),
           "prepare-data: --prompt-field, --response-field, --messages-field, --chat-template "
           "and --chat-template-file apply to --sft-jsonl files");
  ZT_CHECK(!vm.count("messages-field") ||
               (vm["prompt-field"].defaulted() && vm["response-field"].defaulted()),
           "prepare-data: --messages-field replaces --prompt-field and --response-field");
  ZT_CHECK(vm["document-eos"].defaulted() ||
               (vm.count("tokenizer") && (vm.count("text") || vm.count("jsonl"))),
           "prepare-data: --document-eos applies to --text and --jsonl documents with --tokenizer "
           "(an SFT example ends as its response or its chat template ends it)");
  ZT_CHECK(vm["workers"].defaulted() || vm.count("tokenizer"),
           "prepare-data: --workers applies with --tokenizer (byte-level text and .bin shards "
           "need no tokenizing)");
  ZT_CHECK(!vm.count("chat-template-file") || !vm["chat-template-file"].as<std::string>().empty(),
           "prepare-data: --chat-template-file needs the path of a Jinja file");
  ZT_CHECK(vm["chat-end-token"].defaulted() || (sft && renders_chat_template(vm)),
           "prepare-data: --chat-end-token needs --sft-jsonl and --chat-template or "
           "--chat-template-file (it closes what the chat template leaves unclosed)");
  ZT_CHECK(!vm["chat-end-token"].as<std::string>().empty(),
           "prepare-data: --chat-end-token must be auto, off or a token");
  ZT_CHECK(vm["tools-field"].defaulted() || renders_chat_template(vm),
           "prepare-data: --tools-field needs --chat-template (the template renders the tools)");
  for (const char* option : {"system-field", "history-field"}) {
    ZT_CHECK(!vm.count(option) || (sft && renders_chat_template(vm)),
             std::string("prepare-data: --") + option +
                 " needs --sft-jsonl and --chat-template or --chat-template-file " +
                 "(the chat template places " +
                 (option[0] == 's' ? "the system prompt)" : "the earlier turns)"));
    ZT_CHECK(!vm.count(option) || !vm[option].as<std::string>().empty(),
             std::string("prepare-data: --") + option + " must name a JSON field");
  }
  ZT_CHECK(!vm.count("history-field") || !vm.count("messages-field"),
           "prepare-data: --history-field goes with --prompt-field (a conversation of "
           "--messages-field holds its own earlier turns)");
  ZT_CHECK(!vm.count("messages-field") || renders_chat_template(vm),
           "prepare-data: --messages-field needs --chat-template (the template renders the "
           "conversation)");
}

// "wrote OUT: N tokens from F file(s), tokenizer T, vocabulary V[, loss mask: C tokens counted]".
int report_dataset(const std::string& out, int64_t tokens, size_t files) {
  const TokenDataset written(out);
  std::cout << "wrote " << out << ": " << tokens << " tokens from " << files
            << " file(s), tokenizer " << written.tokenizer() << ", vocabulary "
            << written.vocab_size();
  if (written.has_loss_mask())
    std::cout << ", loss mask: " << written.counted_tokens() << " tokens counted";
  std::cout << "\n";
  return 0;
}

// --tokenizer: text, JSON-lines documents or SFT examples through a Hugging Face tokenizer.
HfTokenizeRequest hf_tokenize_request(const po::variables_map& vm, const std::string& out) {
  const bool sft = vm.count("sft-jsonl") > 0;
  ZT_CHECK(vm.count("text") || vm.count("jsonl") || sft,
           "prepare-data: --tokenizer tokenizes '--text', '--jsonl' or '--sft-jsonl' files");
  ZT_CHECK(vm["vocab-size"].defaulted() && vm["tokenizer-label"].defaulted(),
           "prepare-data: with --tokenizer the vocabulary and the label are the tokenizer's");
  const bool jsonl = vm.count("jsonl") > 0;
  ZT_CHECK(jsonl || vm["text-field"].defaulted(),
           std::string("prepare-data: --text-field applies to --jsonl files") +
               (sft ? " (--sft-jsonl reads --prompt-field and --response-field, or "
                      "--messages-field)"
                    : " (a --text file is one document)"));
  ZT_CHECK(!jsonl || !vm["text-field"].as<std::string>().empty(),
           "prepare-data: --text-field must name the JSON field that holds each document");
  HfTokenizeRequest request;
  request.tokenizer = vm["tokenizer"].as<std::string>();
  request.inputs = vm[sft ? "sft-jsonl" : jsonl ? "jsonl" : "text"].as<std::vector<std::string>>();
  if (jsonl) request.text_field = vm["text-field"].as<std::string>();
  // A --text file is one document, encoded in one call of the tokenizer, whose memory grows with
  // it (3.1 GB for 20.7 MB of text with SmolLM2's tokenizer, measured).
  constexpr std::uintmax_t kLargeTextBytes = std::uintmax_t{64} << 20;
  std::error_code ec;
  for (const std::string& file : jsonl || sft ? std::vector<std::string>{} : request.inputs)
    if (const std::uintmax_t bytes = std::filesystem::file_size(file, ec);
        !ec && bytes > kLargeTextBytes)
      std::cerr << "prepare-data: note: '" << file << "' (" << bytes / (1 << 20)
                << " MiB) is one document, encoded in one call of the tokenizer, which holds "
                   "about 150 bytes of memory per byte of text: split it into files, or give its "
                   "documents as JSON lines, to bound the memory\n";
  if (sft) {
    request.sft =
        SftFields{vm["prompt-field"].as<std::string>(),
                  vm["response-field"].as<std::string>(),
                  renders_chat_template(vm),
                  vm.count("messages-field") ? vm["messages-field"].as<std::string>() : "",
                  vm["tools-field"].as<std::string>(),
                  vm.count("chat-template-file") ? vm["chat-template-file"].as<std::string>() : "",
                  vm.count("system-field") ? vm["system-field"].as<std::string>() : "",
                  vm.count("history-field") ? vm["history-field"].as<std::string>() : "",
                  vm["chat-end-token"].as<std::string>()};
    check_sft_fields(*request.sft, vm.count("messages-field") > 0);
  }
  request.document_eos = parse_auto_switch(vm["document-eos"].as<std::string>(), "--document-eos");
  request.python = vm["python"].as<std::string>();
  request.workers = vm["workers"].as<int>();
  ZT_CHECK(
      request.workers >= 1 && request.workers <= 1024,
      "prepare-data: --workers must be from 1 to 1024, not " + std::to_string(request.workers));
  request.out = out;
  request.overwrite = vm["overwrite"].as<bool>();
  return request;
}

}  // namespace

int cmd_prepare_data(int argc, char** argv) {
  const CommandSpec spec{
      "prepare-data",
      "Build an HDF5 token dataset: text files with the byte-level tokenizer (vocab 256), llm.c "
      ".bin shards (GPT-2 uint16 or Llama 3 uint32 tokens, told by their header), or nanoGPT's "
      "headerless uint16 .bin files, concatenated in order.",
      "zerotrain prepare-data (--text FILES... | --bin FILES... | --nanogpt-bin FILES... "
      "--vocab-size V | --tokenizer PATH ((--text FILES... | --jsonl FILES... [--text-field "
      "NAME]) [--document-eos auto|on|off] | --sft-jsonl FILES... ([--prompt-field NAME] "
      "[--response-field NAME] | --messages-field "
      "NAME) [(--chat-template | --chat-template-file FILE) [--tools-field NAME] "
      "[--system-field NAME] [--history-field NAME] [--chat-end-token auto|off|TOKEN]]) "
      "[--workers N]) "
      "--out FILE.h5 "
      "[--tokenizer-label NAME] [--overwrite]"};
  po::options_description options = prepare_data_options();
  po::variables_map vm;
  if (!parse_command_line(spec, options, nullptr, argc, argv, vm)) return 0;
  check_input_options(vm);
  const bool sft = vm.count("sft-jsonl") > 0;
  require_option(vm, "out", spec.name);
  const std::string out = vm["out"].as<std::string>();
  std::vector<std::pair<std::string, std::string>> read;
  for (const char* option : {"text", "jsonl", "sft-jsonl", "bin", "nanogpt-bin"})
    if (vm.count(option))
      for (const std::string& file : vm[option].as<std::vector<std::string>>())
        read.emplace_back("the input file", file);
  if (vm.count("tokenizer")) read.emplace_back("the tokenizer", vm["tokenizer"].as<std::string>());
  if (vm.count("chat-template-file"))
    read.emplace_back("the chat template", vm["chat-template-file"].as<std::string>());
  check_output_apart_from_inputs(spec.name, out, read);
  // A scheduler's stop (SIGTERM, SIGUSR1) ends the tokenizer step or the writing and unwinds:
  // no output, temporary file or scratch directory is left (io/token_dataset.h).
  const StopSignalHandlers stop_handlers;
  if (vm.count("tokenizer")) {
    const HfTokenizeRequest request = hf_tokenize_request(vm, out);
    return report_dataset(out, prepare_hf_token_dataset(request), request.inputs.size());
  }
  ZT_CHECK(!vm.count("jsonl") && !sft,
           "prepare-data: --jsonl and --sft-jsonl need --tokenizer PATH");
  const bool text = vm.count("text") > 0;
  ZT_CHECK(!text || (vm["vocab-size"].defaulted() && vm["tokenizer-label"].defaulted()),
           "prepare-data: '--vocab-size' and '--tokenizer-label' do not apply to '--text' (256 "
           "byte tokens)");
  const TokenSource kind = text              ? TokenSource::kText
                           : vm.count("bin") ? TokenSource::kLlmcBin
                                             : TokenSource::kNanoGptBin;
  const char* option = text ? "text" : kind == TokenSource::kLlmcBin ? "bin" : "nanogpt-bin";
  const int64_t vocab = vm["vocab-size"].as<int64_t>();
  ZT_CHECK(vocab >= 0, "prepare-data: --vocab-size must be positive, got " + std::to_string(vocab));
  const auto inputs = vm[option].as<std::vector<std::string>>();
  return report_dataset(
      out,
      prepare_token_dataset(inputs, kind, out, {vocab, vm["tokenizer-label"].as<std::string>()},
                            vm["overwrite"].as<bool>()),
      inputs.size());
}

}  // namespace zt

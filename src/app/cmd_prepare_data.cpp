// zerotrain prepare-data: builds an HDF5 token dataset from text files, llm.c .bin shards or
// nanoGPT's headerless .bin files.
#include <cstdlib>
#include <iostream>

#include "app/cli.h"
#include "app/commands.h"
#include "app/hf_tokenize.h"
#include "io/token_dataset.h"
#include "util/error.h"

namespace zt {

int cmd_prepare_data(int argc, char** argv) {
  const CommandSpec spec{
      "prepare-data",
      "Build an HDF5 token dataset: text files with the byte-level tokenizer (vocab 256), llm.c "
      ".bin shards (GPT-2 uint16 or Llama 3 uint32 tokens, told by their header), or nanoGPT's "
      "headerless uint16 .bin files, concatenated in order.",
      "zerotrain prepare-data (--text FILES... | --bin FILES... | --nanogpt-bin FILES... "
      "--vocab-size V | --tokenizer PATH (--text FILES... | --jsonl FILES... [--text-field NAME])) "
      "--out FILE.h5 [--tokenizer-label NAME] [--overwrite]"};
  const char* python_env = std::getenv("ZT_PYTHON");
  po::options_description options("prepare-data options");
  options.add_options()("text", po::value<std::vector<std::string>>()->multitoken(),
                        "UTF-8 text files (byte-level tokens)")(
      "bin", po::value<std::vector<std::string>>()->multitoken(),
      "llm.c .bin files (magic 20240520: GPT-2, 20240801: Llama 3)")(
      "nanogpt-bin", po::value<std::vector<std::string>>()->multitoken(),
      "nanoGPT's headerless uint16 .bin files (needs --vocab-size)")(
      "tokenizer", po::value<std::string>(),
      "Hugging Face tokenizer.json, or a directory holding it, for --text or --jsonl")(
      "jsonl", po::value<std::vector<std::string>>()->multitoken(),
      "JSON-lines files, one document per line (with --tokenizer)")(
      "text-field", po::value<std::string>()->default_value("text"),
      "the field of each JSON line that holds its text")(
      "python", po::value<std::string>()->default_value(python_env ? python_env : "python3"),
      "Python with the tokenizers library (default: $ZT_PYTHON, else python3)")(
      "out", po::value<std::string>(), "output token dataset (.h5)")(
      "vocab-size", po::value<int64_t>()->default_value(0),
      "vocabulary size (default: the llm.c header's tokenizer, 50257 or 128256)")(
      "tokenizer-label", po::value<std::string>()->default_value(""),
      "the tokenizer the dataset is labelled with (default: byte, gpt2, llama3, or unknown for "
      "nanoGPT files)")("overwrite", po::bool_switch(), "replace an existing output file");
  po::variables_map vm;
  if (!parse_command_line(spec, options, nullptr, argc, argv, vm)) return 0;
  ZT_CHECK(vm.count("text") + vm.count("bin") + vm.count("nanogpt-bin") + vm.count("jsonl") == 1,
           "prepare-data: give exactly one of '--text', '--jsonl', '--bin' and '--nanogpt-bin'");
  require_option(vm, "out", spec.name);
  const std::string out = vm["out"].as<std::string>();
  const auto report = [&](int64_t tokens, size_t files) {
    const TokenDataset written(out);
    std::cout << "wrote " << out << ": " << tokens << " tokens from " << files
              << " file(s), tokenizer " << written.tokenizer() << ", vocabulary "
              << written.vocab_size() << "\n";
    return 0;
  };
  if (vm.count("tokenizer")) {
    ZT_CHECK(vm.count("text") || vm.count("jsonl"),
             "prepare-data: --tokenizer tokenizes '--text' or '--jsonl' files");
    ZT_CHECK(vm["vocab-size"].defaulted() && vm["tokenizer-label"].defaulted(),
             "prepare-data: with --tokenizer the vocabulary and the label are the tokenizer's");
    const bool jsonl = vm.count("jsonl") > 0;
    ZT_CHECK(jsonl || vm["text-field"].defaulted(),
             "prepare-data: --text-field applies to --jsonl files (a --text file is one document)");
    ZT_CHECK(!jsonl || !vm["text-field"].as<std::string>().empty(),
             "prepare-data: --text-field must name the JSON field that holds each document");
    const auto inputs = vm[jsonl ? "jsonl" : "text"].as<std::vector<std::string>>();
    return report(
        prepare_hf_token_dataset({vm["tokenizer"].as<std::string>(), inputs,
                                  jsonl ? vm["text-field"].as<std::string>() : "",
                                  vm["python"].as<std::string>(), out, vm["overwrite"].as<bool>()}),
        inputs.size());
  }
  ZT_CHECK(!vm.count("jsonl"), "prepare-data: --jsonl needs --tokenizer PATH");
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
  return report(
      prepare_token_dataset(inputs, kind, out, {vocab, vm["tokenizer-label"].as<std::string>()},
                            vm["overwrite"].as<bool>()),
      inputs.size());
}

}  // namespace zt

// zerotrain prepare-data: builds an HDF5 token dataset from text files or llm.c .bin shards.
#include <iostream>

#include "app/cli.h"
#include "app/commands.h"
#include "io/token_dataset.h"
#include "util/error.h"

namespace zt {

int cmd_prepare_data(int argc, char** argv) {
  const CommandSpec spec{
      "prepare-data",
      "Build an HDF5 token dataset: text files with the byte-level tokenizer (vocab 256), or "
      "llm.c/nanoGPT .bin token shards (GPT-2 tokens), concatenated in order.",
      "zerotrain prepare-data (--text FILES... | --bin FILES...) --out FILE.h5 "
      "[--vocab-size V] [--overwrite]"};
  po::options_description options("prepare-data options");
  options.add_options()("text", po::value<std::vector<std::string>>()->multitoken(),
                        "UTF-8 text files (byte-level tokens)")(
      "bin", po::value<std::vector<std::string>>()->multitoken(), "llm.c/nanoGPT .bin files")(
      "out", po::value<std::string>(), "output token dataset (.h5)")(
      "vocab-size", po::value<int64_t>()->default_value(kGpt2VocabSize),
      "vocabulary size of --bin tokens")("overwrite", po::bool_switch(),
                                         "replace an existing output file");
  po::variables_map vm;
  if (!parse_command_line(spec, options, nullptr, argc, argv, vm)) return 0;
  ZT_CHECK(vm.count("text") + vm.count("bin") == 1,
           "prepare-data: give exactly one of '--text' or '--bin'");
  require_option(vm, "out", spec.name);
  ZT_CHECK(!vm.count("text") || vm["vocab-size"].defaulted(),
           "prepare-data: '--vocab-size' applies to '--bin' only (text uses 256 byte tokens)");
  const bool text = vm.count("text") > 0;
  const auto inputs = vm[text ? "text" : "bin"].as<std::vector<std::string>>();
  const std::string out = vm["out"].as<std::string>();
  const int64_t tokens =
      prepare_token_dataset(inputs, text ? TokenSource::kText : TokenSource::kLlmcBin, out,
                            vm["vocab-size"].as<int64_t>(), vm["overwrite"].as<bool>());
  std::cout << "wrote " << out << ": " << tokens << " tokens from " << inputs.size()
            << " file(s)\n";
  return 0;
}

}  // namespace zt

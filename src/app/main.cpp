// zerotrain: one SPMD executable, subcommands dispatched by name.
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/error_report.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  std::function<int(int, char**)> run;
};

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> table = {
      {"init", "write a freshly initialised model directory (preset or HF config.json)",
       zt::cmd_init},
      {"prepare-data", "build an HDF5 token dataset from text files or llm.c .bin shards",
       zt::cmd_prepare_data},
      {"info", "summarise a model directory, token dataset or checkpoint", zt::cmd_info},
      {"train", "train a model (ZeRO stages 0-3)", zt::cmd_train},
      {"eval", "mean next-token cross-entropy of a model on a token dataset", zt::cmd_eval},
      {"generate", "continue a prompt with a model (greedy or sampled)", zt::cmd_generate},
      {"estimate", "per-rank memory of ZeRO stages 0-3; which stage fits", zt::cmd_estimate},
      {"consolidate", "write a training checkpoint's weights as a bf16 model directory",
       zt::cmd_consolidate},
      {"import",
       "import a Hugging Face checkpoint (safetensors or PyTorch .bin) or a GGUF file as a model "
       "directory",
       zt::cmd_import},
      {"export", "write a model directory as Hugging Face safetensors + config.json, or as GGUF",
       zt::cmd_export},
      {"report", "scaling table and plots over train output directories", zt::cmd_report},
  };
  return table;
}

void print_usage(std::ostream& out) {
  out << "zerotrain " << ZEROTRAIN_VERSION << " - ZeRO training engine for Llama-style models\n\n"
      << "usage: zerotrain COMMAND [options]   (zerotrain COMMAND --help for its options)\n\n"
      << "commands:\n";
  for (const auto& c : subcommands()) out << "  " << c.name << "\t" << c.summary << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << "zerotrain " << ZEROTRAIN_VERSION << "\n";
    return 0;
  }
  for (const auto& c : subcommands()) {
    if (c.name == std::string(argv[1])) {
      // The error first, then MPI's end: the whole job stops, and this rank's line is out.
      try {
        return c.run(argc - 1, argv + 1);
      } catch (...) {
        return zt::report_error_and_end_mpi(c.name);
      }
    }
  }
  std::cerr << "zerotrain: unknown command '" << argv[1] << "'\n\n";
  print_usage(std::cerr);
  return 2;
}

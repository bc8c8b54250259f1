// zerotrain: one SPMD executable, subcommands dispatched by name.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "app/commands.h"
#include "runtime/mpi_runtime.h"
#include "util/error.h"

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
      {"import", "import a Hugging Face checkpoint (safetensors) as a model directory",
       zt::cmd_import},
      {"export", "write a model directory as Hugging Face safetensors + config.json",
       zt::cmd_export},
      {"report", "scaling table and plots over train output directories", zt::cmd_report},
  };
  return table;
}

// " (rank R of N)" when the launcher started several ranks (Open MPI, PMIx or Slurm variables),
// so that N error lines of one job say whose they are; "" for a single process.
std::string rank_label() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
  };
  std::string rank = env("OMPI_COMM_WORLD_RANK"), size = env("OMPI_COMM_WORLD_SIZE");
  if (rank.empty()) rank = env("PMIX_RANK");
  if (rank.empty() || size.empty()) {
    rank = rank.empty() ? env("SLURM_PROCID") : rank;
    size = size.empty() ? env("SLURM_NTASKS") : size;
  }
  if (rank.empty() || size.empty() || size == "1") return "";
  return " (rank " + rank + " of " + size + ")";
}

// "zerotrain CMD: error (rank R of N): WHAT" as one write(2), so that the lines of several ranks
// failing at once never interleave mid-line in a shared log.
void print_error_line(const std::string& command, const char* kind, const std::string& what) {
  const std::string line = "zerotrain " + command + ": " + kind + rank_label() + ": " + what + "\n";
  std::cerr.flush();
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
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
      } catch (const zt::AgreedError& e) {
        print_error_line(c.name, "error", e.what());
        zt::end_mpi_after_error(/*agreed=*/true, 1);
        return 1;
      } catch (const zt::Error& e) {
        print_error_line(c.name, "error", e.what());
        zt::end_mpi_after_error(/*agreed=*/false, 1);
        return 1;
      } catch (const std::bad_alloc&) {
        print_error_line(c.name, "error",
                         "out of memory: an allocation failed (the model, the batch or a buffer "
                         "is larger than this host's memory; see `zerotrain estimate`)");
        zt::end_mpi_after_error(/*agreed=*/false, 1);
        return 1;
      } catch (const std::exception& e) {
        print_error_line(c.name, "internal error", e.what());
        zt::end_mpi_after_error(/*agreed=*/false, 1);
        return 1;
      }
    }
  }
  std::cerr << "zerotrain: unknown command '" << argv[1] << "'\n\n";
  print_usage(std::cerr);
  return 2;
}

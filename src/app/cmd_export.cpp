// zerotrain export: a model directory as a Hugging Face directory (io/safetensors.h):
// model.safetensors (or shards + model.safetensors.index.json) and config.json. Streams tensor by
// tensor; prints a JSON summary on stdout.
#include <cmath>
#include <iostream>

#include "app/cli.h"
#include "app/commands.h"
#include "app/run_setup.h"
#include "io/safetensors.h"
#include "io/tokenizer_files.h"
#include "util/error.h"

namespace zt {

int cmd_export(int argc, char** argv) {
  const CommandSpec spec{"export",
                         "Write a model directory in Hugging Face format (safetensors + "
                         "config.json).",
                         "zerotrain export MODEL_DIR --format safetensors --out HF_DIR "
                         "[--max-shard-size-mb N] [--overwrite]"};
  po::options_description options("export options");
  options.add_options()("model", po::value<std::string>(), "model directory to export")(
      "format", po::value<std::string>()->default_value("safetensors"),
      "output format: safetensors")("out", po::value<std::string>(), "output directory")(
      "max-shard-size-mb", po::value<double>()->default_value(5120),
      "largest safetensors file in MiB; larger models are sharded with an index")(
      "overwrite", po::bool_switch(), "replace an existing non-empty output directory");
  po::positional_options_description positional;
  positional.add("model", 1);
  po::variables_map vm;
  if (!parse_command_line(spec, options, &positional, argc, argv, vm)) return 0;
  require_option(vm, "model", spec.name);
  require_option(vm, "out", spec.name);
  const std::string format = vm["format"].as<std::string>();
  ZT_CHECK(format == "safetensors",
           "export: unknown --format '" + format + "' (supported: safetensors)");
  const uint64_t shard_bytes =
      shard_limit_bytes(vm["max-shard-size-mb"].as<double>(), "max-shard-size-mb", spec.name);
  const SafetensorsExport result =
      export_safetensors(vm["model"].as<std::string>(), vm["out"].as<std::string>(), shard_bytes,
                         vm["overwrite"].as<bool>());
  // The tokenizer files the model directory carries (train and import put them there).
  const std::vector<std::string> tokenizer =
      copy_tokenizer_files(vm["model"].as<std::string>(), result.dir);
  std::cout << nlohmann::json{{"out", result.dir},
                              {"files", result.files},
                              {"tokenizer_files", tokenizer},
                              {"bytes", result.bytes},
                              {"seconds", result.seconds}}
                   .dump()
            << std::endl;
  return 0;
}

}  // namespace zt

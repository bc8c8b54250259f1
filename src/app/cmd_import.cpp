// zerotrain import: a Hugging Face checkpoint directory as a zerotrain model directory
// (io/hf_import.h). Prints what it read, rounded and ignored.
#include <chrono>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/commands.h"
#include "app/run_setup.h"
#include "io/fs_util.h"
#include "io/hf_import.h"
#include "io/tokenizer_files.h"
#include "model/layout.h"
#include "util/error.h"

namespace zt {

int cmd_import(int argc, char** argv) {
  const CommandSpec spec{"import",
                         "Import a Hugging Face checkpoint (config.json + safetensors) as a "
                         "zerotrain model directory (bf16 HDF5 shards).",
                         "zerotrain import HF_DIR --out MODEL_DIR [--shard-size-mb N] "
                         "[--overwrite] [--strict-config]"};
  po::options_description options("import options");
  options.add_options()("hf-dir", po::value<std::string>(),
                        "Hugging Face directory: config.json and model.safetensors or "
                        "model.safetensors.index.json with its shards")(
      "out", po::value<std::string>(), "output model directory")(
      "shard-size-mb", po::value<int64_t>()->default_value(2048),
      "largest shard file size in MiB (shards split at tensor boundaries)")(
      "overwrite", po::bool_switch(), "replace an existing non-empty output directory")(
      "strict-config", po::bool_switch(),
      "refuse config.json keys zerotrain does not know (default: accept them with a warning)");
  po::positional_options_description positional;
  positional.add("hf-dir", 1);
  po::variables_map vm;
  if (!parse_command_line(spec, options, &positional, argc, argv, vm)) return 0;
  require_option(vm, "hf-dir", spec.name);
  require_option(vm, "out", spec.name);
  const int64_t shard_mb = vm["shard-size-mb"].as<int64_t>();
  check_count(shard_mb, 1, "shard-size-mb", spec.name);
  const auto start = std::chrono::steady_clock::now();
  const HfImportResult r = import_hf_model(
      vm["hf-dir"].as<std::string>(), vm["out"].as<std::string>(),
      static_cast<uint64_t>(shard_mb) << 20, vm["overwrite"].as<bool>(),
      vm["strict-config"].as<bool>() ? UnknownConfigKeys::kRefuse : UnknownConfigKeys::kAccept);
  const std::string out = vm["out"].as<std::string>();
  std::vector<std::string> tokenizer;
  try {
    tokenizer = copy_tokenizer_files(vm["hf-dir"].as<std::string>(), out);
    // Where the model came from and what was read past, for run.json of the runs that use it.
    write_text_file(
        out + "/" + kImportRecordFile,
        nlohmann::json{
            {"hf_dir", std::filesystem::absolute(vm["hf-dir"].as<std::string>()).string()},
            {"source_files", r.source_files},
            {"ignored_config_keys", r.ignored_keys},
            {"unknown_config_keys", r.unknown_keys},
            {"ignored_tensors", r.ignored_tensors},
            {"rounded_tensors", r.rounded_tensors},
            {"tokenizer_files", tokenizer}}
                .dump(2) +
            "\n");
  } catch (const Error&) {
    // A refused import leaves no output, the model it had already written included.
    std::error_code ec;
    std::filesystem::remove_all(out, ec);
    throw;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "imported " << vm["hf-dir"].as<std::string>() << " -> " << out << ": "
            << ParamLayout(r.config).total_numel() << " parameters from " << r.source_files.size()
            << " safetensors file(s), " << r.bytes_written << " bytes of bf16 in " << seconds
            << " s\n";
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (!tokenizer.empty())
    std::cout << "  tokenizer files copied beside the model: " << list(tokenizer) << "\n";
  if (r.rounded_tensors > 0)
    std::cout << "  " << r.rounded_tensors
              << " tensor(s) stored in F16/F32 were rounded to bf16 (nearest even)\n";
  if (!r.ignored_keys.empty())
    std::cout << "  config.json keys that do not change the model, ignored: "
              << list(r.ignored_keys) << "\n";
  for (const std::string& key : r.unknown_keys)
    std::cerr << "zerotrain import: warning: config.json key '" << key
              << "' is not one zerotrain reads or knows; accepted as not changing the model "
                 "(transformers' modelling code does not read it either; --strict-config refuses "
                 "it), recorded in "
              << kImportRecordFile << "\n";
  if (!r.ignored_tensors.empty())
    std::cout << "  stored tensors that are not parameters of the model, ignored: "
              << list(r.ignored_tensors) << "\n";
  return 0;
}

}  // namespace zt

// zerotrain import: a Hugging Face checkpoint directory (io/hf_import.h) or a llama.cpp GGUF file
// (io/gguf_import.h) as a zerotrain model directory. Prints what it read, rounded and ignored.
#include <filesystem>
#include <iostream>

#include "app/cli.h"
#include "app/commands.h"
#include "app/run_setup.h"
#include "io/fs_util.h"
#include "io/gguf_import.h"
#include "io/hf_import.h"
#include "io/meta_import.h"
#include "model/layout.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace zt {

namespace {

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The lines import_hf and import_meta end with: tensors rounded, the config file's unknown keys
// (a warning each, `unread_by` saying who else reads past them) and the stored tensors read past.
// `hints`: each unknown key's likely intended key ("" for none), or empty.
void print_import_notes(int64_t rounded, const std::string& config_file,
                        const std::vector<std::string>& unknown_keys,
                        const std::vector<std::string>& hints, const std::string& unread_by,
                        const std::vector<std::string>& ignored_tensors) {
  if (rounded > 0)
    std::cout << "  " << rounded
              << " tensor(s) stored in F16/F32 were rounded to bf16 (nearest even)\n";
  for (size_t i = 0; i < unknown_keys.size(); ++i)
    std::cerr << unknown_config_key_warning("import", config_file, unknown_keys[i],
                                            i < hints.size() ? hints[i] : "", unread_by)
              << ", recorded in " << kImportRecordFile << "\n";
  if (!ignored_tensors.empty())
    std::cout << "  stored tensors that are not parameters of the model, ignored: "
              << listed(ignored_tensors) << "\n";
}

void import_hf(const po::variables_map& vm, const std::string& source, const std::string& out,
               uint64_t shard_bytes) {
  ZT_CHECK(vm["llama-version"].as<std::string>().empty(),
           "import: --llama-version applies to a Meta checkpoint (params.json, "
           "consolidated.00.pth); '" +
               source + "' is a Hugging Face directory, whose config.json says what it is");
  ZT_CHECK(vm["tokenizer"].as<std::string>().empty(),
           "import: --tokenizer applies to a GGUF file or a Meta checkpoint; a Hugging Face "
           "directory's own tokenizer files are copied");
  const Stopwatch clock;
  const HfImportResult r = import_hf_model(
      source, out, shard_bytes, vm["overwrite"].as<bool>(),
      vm["strict-config"].as<bool>() ? UnknownConfigKeys::kRefuse : UnknownConfigKeys::kAccept);
  std::cout << "imported " << source << " -> " << out << ": " << ParamLayout(r.config).total_numel()
            << " parameters from " << r.source_files.size() << " " << r.weights_format
            << " file(s), " << r.bytes_written << " bytes of bf16 in " << clock.seconds() << " s\n";
  if (r.index_ignored)
    std::cout << "  read " << std::filesystem::path(r.source_files.at(0)).filename().string()
              << "; the " << std::filesystem::path(r.source_files.at(0)).filename().string()
              << ".index.json beside it was not used (transformers reads the single file too)\n";
  if (!r.tokenizer_files.empty())
    std::cout << "  tokenizer files copied beside the model: " << listed(r.tokenizer_files) << "\n";
  if (!r.ignored_keys.empty())
    std::cout << "  config.json keys that do not change the model, ignored: "
              << listed(r.ignored_keys) << "\n";
  print_import_notes(r.rounded_tensors, "config.json", r.unknown_keys, r.unknown_key_hints,
                     "transformers' modelling code does not read it either", r.ignored_tensors);
}

void import_gguf(const po::variables_map& vm, const std::string& source, const std::string& out,
                 uint64_t shard_bytes) {
  ZT_CHECK(!vm["strict-config"].as<bool>(),
           "import: --strict-config applies to a Hugging Face config.json, not a GGUF file");
  ZT_CHECK(vm["llama-version"].as<std::string>().empty(),
           "import: --llama-version applies to a Meta checkpoint, not a GGUF file (its metadata "
           "says what it is)");
  const Stopwatch clock;
  const GgufImportResult r = import_gguf_model(source, out, shard_bytes, vm["overwrite"].as<bool>(),
                                               vm["tokenizer"].as<std::string>());
  std::string types;
  for (const auto& [type, count] : r.tensor_types)
    types += (types.empty() ? "" : ", ") + std::to_string(count) + " " + type;
  std::cout << "imported " << source << " -> " << out << ": " << r.architecture << ", "
            << ParamLayout(r.config).total_numel() << " parameters ("
            << (r.config.tie_word_embeddings ? "tied embeddings" : "untied embeddings")
            << "), dequantized from " << types << " tensors into " << r.bytes_written
            << " bytes of bf16 in " << clock.seconds() << " s\n";
  std::cout << "  tokenizer from " << r.tokenizer_source << ": " << listed(r.tokenizer_files)
            << "\n";
}

void import_meta(const po::variables_map& vm, const std::string& source, const std::string& out,
                 uint64_t shard_bytes) {
  const Stopwatch clock;
  const std::string tokenizer = vm["tokenizer"].as<std::string>();
  const MetaImportResult r = import_meta_model(
      source, out, shard_bytes, vm["overwrite"].as<bool>(), vm["llama-version"].as<std::string>(),
      tokenizer,
      vm["strict-config"].as<bool>() ? UnknownConfigKeys::kRefuse : UnknownConfigKeys::kAccept);
  std::cout << "imported " << source << " (Meta's layout, Llama "
            << vm["llama-version"].as<std::string>() << ") -> " << out << ": "
            << ParamLayout(r.config).total_numel() << " parameters from " << listed(r.weights_files)
            << ", " << r.bytes_written << " bytes of bf16 in " << clock.seconds() << " s\n";
  if (!r.tokenizer_files.empty())
    std::cout << "  tokenizer files copied from " << tokenizer << ": " << listed(r.tokenizer_files)
              << "\n";
  else
    std::cout << "  no tokenizer files: Meta's tokenizer.model is not converted; --tokenizer "
                 "HF_DIR copies a Hugging Face directory's (the Hub repository's root)\n";
  print_import_notes(r.rounded_tensors, "params.json", r.unknown_keys, {},
                     "Meta's reference code and transformers' converter do not read it either",
                     r.ignored_tensors);
}

}  // namespace

int cmd_import(int argc, char** argv) {
  const CommandSpec spec{
      "import",
      "Import a Hugging Face checkpoint (config.json + safetensors or PyTorch .bin weights), a "
      "llama.cpp GGUF file or a Llama checkpoint in Meta's layout (params.json + "
      "consolidated.00.pth) as a zerotrain model directory (bf16 HDF5 shards, with the "
      "tokenizer files).",
      "zerotrain import (HF_DIR | FILE.gguf | META_DIR --llama-version V) --out MODEL_DIR "
      "[--shard-size-mb N] [--overwrite] [--strict-config] [--tokenizer HF_TOKENIZER_DIR]"};
  po::options_description options("import options");
  options.add_options()("source", po::value<std::string>(),
                        "a Hugging Face directory (config.json and model.safetensors or "
                        "model.safetensors.index.json with its shards; without them "
                        "pytorch_model.bin or pytorch_model.bin.index.json), a GGUF file, or a "
                        "directory of Meta's params.json and consolidated.00.pth")(
      "out", po::value<std::string>(), "output model directory")(
      "shard-size-mb", po::value<int64_t>()->default_value(2048),
      "largest shard file size in MiB (shards split at tensor boundaries)")(
      "overwrite", po::bool_switch(), "replace an existing non-empty output directory")(
      "strict-config", po::bool_switch(),
      "refuse config.json (params.json) keys zerotrain does not know (default: accept them with "
      "a warning)")("tokenizer", po::value<std::string>()->default_value(""),
                    "GGUF: take the tokenizer files from this Hugging Face directory instead of "
                    "rebuilding them from the file's vocabulary; Meta's layout: copy them from it")(
      "llama-version", po::value<std::string>()->default_value(""),
      "Meta's layout: the Llama it is (1, 2, 3, 3.1, 3.2 or Guard-3), as transformers' "
      "convert_llama_weights_to_hf.py --llama_version: the context length, RoPE scaling and "
      "tied head follow from it");
  po::positional_options_description positional;
  positional.add("source", 1);
  po::variables_map vm;
  if (!parse_command_line(spec, options, &positional, argc, argv, vm)) return 0;
  require_option(vm, "source", spec.name);
  require_option(vm, "out", spec.name);
  const int64_t shard_mb = vm["shard-size-mb"].as<int64_t>();
  check_count(shard_mb, 1, "shard-size-mb", spec.name);
  const std::string source = vm["source"].as<std::string>(), out = vm["out"].as<std::string>();
  const auto shard_bytes = static_cast<uint64_t>(shard_mb) << 20;
  check_output_apart_from_inputs(
      spec.name, out,
      {{"the model", source}, {"the tokenizer", vm["tokenizer"].as<std::string>()}});
  std::error_code ec;
  ZT_CHECK(std::filesystem::exists(source, ec),
           "import: '" + source +
               "' does not exist (import takes a Hugging Face model directory, a GGUF file or a "
               "Meta checkpoint directory; Hub ids are not downloaded)");
  const std::filesystem::path dir(source);
  if (std::filesystem::is_regular_file(source, ec)) {
    ZT_CHECK(is_gguf_file(source),
             "import: '" + source +
                 "' is a file but not a GGUF file (no 'GGUF' magic); give a GGUF file, or the "
                 "directory of a Hugging Face checkpoint or of Meta's params.json and "
                 "consolidated.00.pth");
    import_gguf(vm, source, out, shard_bytes);
  } else if (is_meta_checkpoint_dir(source)) {
    import_meta(vm, source, out, shard_bytes);
  } else if (std::filesystem::exists(dir / kMetaParamsFile, ec) &&
             !std::filesystem::exists(dir / "config.json", ec)) {
    fail("import: '" + source + "' has Meta's params.json but no " + kMetaWeightsFile +
         " (a Meta checkpoint's weights), and no config.json (a Hugging Face checkpoint's)");
  } else {
    import_hf(vm, source, out, shard_bytes);
  }
  return 0;
}

}  // namespace zt

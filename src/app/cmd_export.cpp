// zerotrain export: a model directory as a Hugging Face directory (io/safetensors.h):
// model.safetensors (or shards + model.safetensors.index.json) and config.json, streamed tensor by
// tensor; or as one llama.cpp GGUF file (io/gguf_export.h). With --merge-lora ADAPTER_DIR, the
// model with a PEFT LoRA adapter merged in (io/lora_merge.h). With --format peft, a LoRA run's
// training checkpoint as PEFT's adapter directory (checkpoint/consolidate.h). Prints a JSON
// summary on stdout.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "app/cli.h"
#include "app/commands.h"
#include "app/run_setup.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/consolidate.h"
#include "io/fs_util.h"
#include "io/gguf_export.h"
#include "io/lora_merge.h"
#include "io/peft_adapter_file.h"
#include "io/safetensors.h"
#include "io/safetensors_export.h"
#include "util/error.h"

namespace zt {

namespace {

// A training checkpoint given as the model to export (itself, or a run's directory, its
// checkpoints root or `latest`, which name one): refused saying which command writes it.
void refuse_training_checkpoint(const std::string& given) {
  std::error_code ec;
  std::string checkpoint = given;
  try {
    checkpoint = checkpoint_dir_through_latest(given);
  } catch (const Error&) {  // a `latest` that names no checkpoint: no run's, the model's to read
  }
  ZT_CHECK(!std::filesystem::exists(checkpoint + "/" + kCheckpointManifestFile, ec),
           "export: '" + given + "' " +
               (checkpoint == given ? std::string("is a training checkpoint")
                                    : "names the training checkpoint '" + checkpoint +
                                          "' (through its latest tag)") +
               ": `zerotrain consolidate` writes its model (a LoRA run's checkpoint: export "
               "--format peft writes its adapter)" +
               (std::filesystem::is_directory(given + "/final", ec)
                    ? "; the run's final model is '" + given + "/final'"
                    : ""));
}

// --format peft: the adapter of a LoRA run's training checkpoint. What else MODEL may be (a PEFT
// adapter directory, a model directory) is named in the refusal.
int export_peft_adapter(const po::variables_map& vm, const std::string& merge_adapter) {
  ZT_CHECK(merge_adapter.empty(),
           "export: --merge-lora writes a merged model and --format peft an adapter; give one");
  const std::string checkpoint =
      checkpoint_dir_through_latest(strip_trailing_slashes(vm["model"].as<std::string>()));
  std::error_code ec;
  const auto has = [&](const char* file) {
    return std::filesystem::exists(checkpoint + "/" + file, ec);
  };
  const std::string wanted =
      "; --format peft takes a LoRA run's training checkpoint (OUT/checkpoints/step-N)";
  ZT_CHECK(!has(kPeftConfigFile), "export: '" + checkpoint +
                                      "' is already PEFT's adapter directory (" + kPeftConfigFile +
                                      ")" + wanted);
  ZT_CHECK(!has("config.json"), "export: '" + checkpoint + "' is a model directory" + wanted);
  const ConsolidatedModel result =
      write_checkpoint_adapter(checkpoint, vm["out"].as<std::string>(), vm["overwrite"].as<bool>());
  std::cout << nlohmann::json{{"checkpoint", checkpoint},
                              {"out", result.dir},
                              {"bytes", result.bytes},
                              {"seconds", result.seconds}}
                   .dump()
            << std::endl;
  return 0;
}

// A GGUF export of a model with a sliding window: llama.cpp will not apply it.
void warn_if_window_ignored(const std::string& model, int64_t window) {
  if (window <= 0) return;
  std::fprintf(stderr,
               "warning: export: %s has a sliding window of %lld tokens; the GGUF file records it "
               "(llama.attention.sliding_window, which an import reads back), but llama.cpp's "
               "llama architecture does not apply it: past %lld tokens it attends over the whole "
               "context, as it does for its own Mistral files\n",
               model.c_str(), static_cast<long long>(window), static_cast<long long>(window));
}

// --format gguf: `model` (the one given, or its merge with --merge-lora) as one GGUF file, named
// (general.name) by --gguf-name or by the model given, not by a merged copy's scratch directory.
int export_gguf_file(const po::variables_map& vm, const std::string& model) {
  const std::string name = vm.count("gguf-name") ? vm["gguf-name"].as<std::string>()
                                                 : gguf_model_name(vm["model"].as<std::string>());
  const GgufExport result = export_gguf(model, vm["out"].as<std::string>(),
                                        parse_gguf_out_type(vm["gguf-type"].as<std::string>()),
                                        vm["overwrite"].as<bool>(), name);
  warn_if_window_ignored(model, result.sliding_window_ignored);
  std::cout << nlohmann::json{{"out", result.path},
                              {"bytes", result.bytes},
                              {"tensor_types", result.tensor_types},
                              {"seconds", result.seconds}}
                   .dump()
            << std::endl;
  return 0;
}

}  // namespace

int cmd_export(int argc, char** argv) {
  const CommandSpec spec{"export",
                         "Write a model directory in Hugging Face format (safetensors + "
                         "config.json), or as a llama.cpp GGUF file; a LoRA run's checkpoint as "
                         "a PEFT adapter.",
                         "zerotrain export MODEL_DIR [--format safetensors] --out HF_DIR "
                         "[--max-shard-size-mb N] [--overwrite]\n"
                         "       zerotrain export MODEL_DIR --format gguf --out FILE.gguf "
                         "[--gguf-type f32|f16|bf16|q8_0] [--gguf-name NAME] [--overwrite]\n"
                         "       zerotrain export BASE_DIR --merge-lora ADAPTER_DIR --out ... "
                         "(either format)\n"
                         "       zerotrain export CHECKPOINT_DIR --format peft --out ADAPTER_DIR "
                         "[--overwrite]"};
  po::options_description options("export options");
  options.add_options()("model", po::value<std::string>(),
                        "model directory to export (--format peft: a LoRA run's training "
                        "checkpoint)")(
      "format", po::value<std::string>()->default_value("safetensors"),
      "output format: safetensors (a Hugging Face directory), gguf (one llama.cpp file) or peft "
      "(a LoRA checkpoint's adapter_config.json + adapter_model.safetensors)")(
      "out", po::value<std::string>(), "output directory (safetensors) or file (gguf)")(
      "gguf-type", po::value<std::string>()->default_value("bf16"),
      "gguf: the matrices' type, f32, f16, bf16 or q8_0 (norms and biases stay f32)")(
      "gguf-name", po::value<std::string>(),
      "gguf: the model's name (general.name, which llama.cpp and Ollama list); default: the name "
      "of the GGUF file the model was imported from, else the model directory's (a train run's "
      "directory for its final/)")(
      "max-shard-size-mb", po::value<double>()->default_value(5120),
      "largest safetensors file in MiB; larger models are sharded with an index")(
      "overwrite", po::bool_switch(), "replace an existing non-empty output directory")(
      "merge-lora", po::value<std::string>(),
      "merge this PEFT adapter directory (adapter_config.json + adapter_model.safetensors, "
      "e.g. a LoRA run's OUT/final) into the model first: W + s·B·A, as PEFT's "
      "merge_and_unload");
  po::positional_options_description positional;
  positional.add("model", 1);
  po::variables_map vm;
  if (!parse_command_line(spec, options, &positional, argc, argv, vm)) return 0;
  require_option(vm, "model", spec.name);
  require_option(vm, "out", spec.name);
  const std::string adapter = vm.count("merge-lora") ? vm["merge-lora"].as<std::string>() : "";
  check_output_apart_from_inputs(
      spec.name, vm["out"].as<std::string>(),
      {{"the model", vm["model"].as<std::string>()}, {"the LoRA adapter", adapter}});
  const std::string format = vm["format"].as<std::string>();
  ZT_CHECK(format == "safetensors" || format == "gguf" || format == "peft",
           "export: unknown --format '" + format + "' (supported: safetensors, gguf, peft)");
  ZT_CHECK(format == "gguf" || vm["gguf-type"].defaulted(),
           "export: --gguf-type applies to --format gguf");
  ZT_CHECK(format == "gguf" || !vm.count("gguf-name"),
           "export: --gguf-name applies to --format gguf");
  ZT_CHECK(format == "safetensors" || vm["max-shard-size-mb"].defaulted(),
           "export: --max-shard-size-mb applies to --format safetensors");
  if (format == "peft") return export_peft_adapter(vm, adapter);
  refuse_training_checkpoint(strip_trailing_slashes(vm["model"].as<std::string>()));
  // --merge-lora: the merged model is written beside the output first, then exported from there.
  std::string model = vm["model"].as<std::string>();
  const std::string merged =
      adapter.empty()
          ? ""
          : temp_sibling(strip_trailing_slashes(vm["out"].as<std::string>())) + ".merged";
  struct RemoveMerged {
    std::string dir;
    ~RemoveMerged() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } remove_merged{merged};
  if (!adapter.empty()) {
    write_merged_model_dir(model, adapter, merged, /*overwrite=*/true);
    model = merged;
  }
  if (format == "gguf") return export_gguf_file(vm, model);
  const uint64_t shard_bytes =
      shard_limit_bytes(vm["max-shard-size-mb"].as<double>(), "max-shard-size-mb", spec.name);
  const SafetensorsExport result = export_safetensors(model, vm["out"].as<std::string>(),
                                                      shard_bytes, vm["overwrite"].as<bool>());
  std::cout << nlohmann::json{{"out", result.dir},
                              {"files", result.files},
                              {"tokenizer_files", result.tokenizer_files},
                              {"bytes", result.bytes},
                              {"seconds", result.seconds}}
                   .dump()
            << std::endl;
  return 0;
}

}  // namespace zt

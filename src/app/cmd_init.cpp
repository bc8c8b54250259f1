// zerotrain init: writes a freshly initialised bf16 model directory.
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/commands.h"
#include "app/run_setup.h"
#include "io/fs_util.h"
#include "io/model_dir.h"
#include "model/config.h"
#include "model/layout.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace zt {
namespace {

// The model a Hugging Face config.json describes; each key zerotrain neither reads nor knows is
// warned of, with the key it most likely misspells (or refused with `strict`).
ModelConfig config_with_warnings(const std::string& path, bool strict) {
  const ModelConfig config = ModelConfig::from_hf_file(
      path, strict ? UnknownConfigKeys::kRefuse : UnknownConfigKeys::kAccept);
  const nlohmann::json j = read_json_file(path);
  for (const std::string& key : hf_config_unknown_keys(j))
    std::cerr << unknown_config_key_warning("init", path, key, hf_config_key_hint(key, j),
                                            "transformers' modelling code does not read it "
                                            "either")
              << "\n";
  return config;
}

}  // namespace

int cmd_init(int argc, char** argv) {
  const CommandSpec spec{"init",
                         "Write a freshly initialised model directory (bf16 HDF5 shards, "
                         "config.json, model.h5.index.json).",
                         "zerotrain init (--preset NAME | --config-json FILE) --seed S --out DIR "
                         "[--shard-size-mb N] [--overwrite] [--strict-config]"};
  po::options_description options("init options");
  options.add_options()("preset", po::value<std::string>(),
                        "model preset: tiny, small, 125m, 1b, 6b, 7b")(
      "config-json", po::value<std::string>(), "Hugging Face config.json describing the model")(
      "seed", po::value<int64_t>(), "initialisation seed")("out", po::value<std::string>(),
                                                           "output model directory")(
      "shard-size-mb", po::value<int64_t>()->default_value(2048),
      "largest shard file size in MiB (shards split at tensor boundaries)")(
      "overwrite", po::bool_switch(), "replace an existing non-empty output directory")(
      "strict-config", po::bool_switch(),
      "refuse a --config-json key zerotrain neither reads nor knows (by default accepted with a "
      "warning naming it)");
  po::variables_map vm;
  if (!parse_command_line(spec, options, nullptr, argc, argv, vm)) return 0;
  ZT_CHECK(vm.count("preset") + vm.count("config-json") == 1,
           "init: give exactly one of '--preset' or '--config-json'");
  require_option(vm, "seed", spec.name);
  require_option(vm, "out", spec.name);
  if (vm.count("config-json"))
    check_output_apart_from_inputs(spec.name, vm["out"].as<std::string>(),
                                   {{"the config", vm["config-json"].as<std::string>()}});
  ZT_CHECK(vm.count("config-json") || !vm["strict-config"].as<bool>(),
           "init: --strict-config applies to --config-json, not to a preset");
  const ModelConfig config = vm.count("preset")
                                 ? preset_config(vm["preset"].as<std::string>())
                                 : config_with_warnings(vm["config-json"].as<std::string>(),
                                                        vm["strict-config"].as<bool>());
  // Signed: Boost would read "-1" into an unsigned as 2^64 - 1.
  const int64_t seed = vm["seed"].as<int64_t>(), shard_mb = vm["shard-size-mb"].as<int64_t>();
  ZT_CHECK(seed >= 0, "init: --seed must be >= 0, got " + std::to_string(seed));
  check_count(shard_mb, 1, "shard-size-mb", spec.name);
  const std::string out = vm["out"].as<std::string>();
  const Stopwatch clock;
  write_model_dir_from_init(out, config, static_cast<uint64_t>(seed),
                            static_cast<uint64_t>(shard_mb) << 20, vm["overwrite"].as<bool>());
  const double seconds = clock.seconds();
  std::cout << "wrote " << out << ": " << ParamLayout(config).total_numel() << " parameters in "
            << seconds << " s\n";
  return 0;
}

}  // namespace zt

// zerotrain init: writes a freshly initialised bf16 model directory.
#include <iostream>

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

int cmd_init(int argc, char** argv) {
  const CommandSpec spec{"init",
                         "Write a freshly initialised model directory (bf16 HDF5 shards, "
                         "config.json, model.h5.index.json).",
                         "zerotrain init (--preset NAME | --config-json FILE) --seed S --out DIR "
                         "[--shard-size-mb N] [--overwrite]"};
  po::options_description options("init options");
  options.add_options()("preset", po::value<std::string>(),
                        "model preset: tiny, small, 125m, 1b, 6b, 7b")(
      "config-json", po::value<std::string>(), "Hugging Face config.json describing the model")(
      "seed", po::value<int64_t>(), "initialisation seed")("out", po::value<std::string>(),
                                                           "output model directory")(
      "shard-size-mb", po::value<int64_t>()->default_value(2048),
      "largest shard file size in MiB (shards split at tensor boundaries)")(
      "overwrite", po::bool_switch(), "replace an existing non-empty output directory");
  po::variables_map vm;
  if (!parse_command_line(spec, options, nullptr, argc, argv, vm)) return 0;
  ZT_CHECK(vm.count("preset") + vm.count("config-json") == 1,
           "init: give exactly one of '--preset' or '--config-json'");
  require_option(vm, "seed", spec.name);
  require_option(vm, "out", spec.name);
  if (vm.count("config-json"))
    check_output_apart_from_inputs(spec.name, vm["out"].as<std::string>(),
                                   {{"the config", vm["config-json"].as<std::string>()}});
  const ModelConfig config = vm.count("preset")
                                 ? preset_config(vm["preset"].as<std::string>())
                                 : ModelConfig::from_hf_file(vm["config-json"].as<std::string>());
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

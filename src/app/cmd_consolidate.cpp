// zerotrain consolidate: a training checkpoint's fp32 masters as a bf16 model directory
// (checkpoint/consolidate.h). Runs as a singleton or under mpirun with any number of ranks; with
// parallel HDF5 every rank writes its slice of every tensor into the shared shards, otherwise
// (or with --serial) rank 0 writes one tensor at a time. Prints a JSON summary on stdout.
#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/commands.h"
#include "app/run_setup.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/consolidate.h"
#include "comm/mpi_communicator.h"
#include "io/fs_util.h"
#include "runtime/mpi_runtime.h"
#include "util/error.h"

namespace zt {

int cmd_consolidate(int argc, char** argv) {
  const CommandSpec spec{"consolidate",
                         "Write a training checkpoint's weights as a bf16 model directory "
                         "(config.json, model.h5.index.json, HDF5 shards).",
                         "[mpirun -np N] zerotrain consolidate CHECKPOINT_DIR --out DIR "
                         "[--serial] [--shard-size-mb N] [--overwrite] [--comm-timeout S]"};
  po::options_description options("consolidate options");
  options.add_options()(
      "checkpoint", po::value<std::string>(),
      "training checkpoint directory (OUT/checkpoints/step-NNNNNNNN; a run's OUT, its "
      "checkpoints/ or their latest: the checkpoint latest names)")("out", po::value<std::string>(),
                                                                    "output model directory")(
      "serial", po::bool_switch(),
      "write one tensor at a time through rank 0 even when HDF5 is parallel")(
      "shard-size-mb", po::value<double>()->default_value(2048),
      "largest shard file size in MiB (shards split at tensor boundaries)")(
      "overwrite", po::bool_switch(), "replace an existing non-empty output directory");
  double comm_timeout = Communicator::kDefaultTimeoutSeconds;
  add_comm_timeout_option(options, &comm_timeout);
  po::positional_options_description positional;
  positional.add("checkpoint", 1);
  po::variables_map vm;
  if (!parse_command_line(spec, options, &positional, argc, argv, vm)) return 0;
  require_option(vm, "checkpoint", spec.name);
  require_option(vm, "out", spec.name);
  const uint64_t shard_bytes =
      shard_limit_bytes(vm["shard-size-mb"].as<double>(), "shard-size-mb", spec.name);
  check_comm_timeout(comm_timeout, spec.name);
  ConsolidateOptions o;
  o.overwrite = vm["overwrite"].as<bool>();
  o.serial = vm["serial"].as<bool>();
  o.shard_limit_bytes = shard_bytes;

  // The arguments' checks before MPI starts: every rank reads the same paths, and an error here
  // ends the process plainly rather than by MPI_Abort's banner (end_mpi_after_error).
  const std::string checkpoint = checkpoint_dir_through_latest(vm["checkpoint"].as<std::string>());
  check_output_apart_from_inputs(spec.name, vm["out"].as<std::string>(),
                                 {{"the checkpoint", checkpoint}});
  MpiRuntime runtime;
  MpiCommunicator comm;
  comm.set_timeout_seconds(comm_timeout);
  const ConsolidatedModel model =
      consolidate_checkpoint(checkpoint, vm["out"].as<std::string>(), comm, o);
  if (comm.rank() == 0)
    std::cout << nlohmann::json{{"checkpoint", checkpoint},   {"out", model.dir},
                                {"bytes", model.bytes},       {"seconds", model.seconds},
                                {"ranks", comm.world_size()}, {"parallel_hdf5", model.parallel}}
                     .dump()
              << std::endl;
  return 0;
}

}  // namespace zt

// Consolidated bf16 models (docs/ARCHITECTURE.md §3 "Consolidated checkpoint"; DeepSpeed's
// stage3_gather_16bit_weights_on_model_save): a model directory that `train --model` and
// `eval --model` load, written from a training checkpoint's fp32 masters (`zerotrain
// consolidate`) or from a live engine (`train`'s OUT/final and --save-consolidated-every).
//
// Two ways to write, never with the whole model on one rank:
//   parallel  (default when HDF5 is parallel) every rank writes its own element ranges straight
//             into the shared shard files (ParallelModelDirWriter): from a checkpoint, rank r of
//             M takes the r-th of M equal slices of every tensor (M independent of the world
//             size that saved it); from an engine, each rank the slice of every group it saves
//             in a training checkpoint (its optimizer shard at stages 1-3).
//   serial    one tensor at a time through rank 0 (ModelDirWriter): from a checkpoint rank 0
//             reads it in bounded chunks; from an engine ZeroEngine::for_each_full_tensor
//             gathers it to rank 0.
// Both give the same tensors bit for bit: bf16 (round to nearest even) of the fp32 masters,
// which are the engine's working weights in bf16 mode.
#pragma once
#include <cstdint>
#include <string>

#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "io/model_dir.h"

namespace zt {

constexpr const char* kConsolidatedSubdir = "consolidated";

struct ConsolidateOptions {
  bool overwrite = false;
  bool serial = false;  // through rank 0 even when parallel HDF5 is available
  uint64_t shard_limit_bytes = kDefaultShardLimitBytes;
};

struct ConsolidatedModel {
  std::string dir;
  uint64_t bytes = 0;     // tensor bytes in the shards
  double seconds = 0;     // wall time on this rank
  bool parallel = false;  // written through parallel HDF5
};

// OUT/consolidated/step-NNNNNNNN.
std::string consolidated_step_dir(const std::string& out_dir, int64_t step);

// Writes the model of the training checkpoint `checkpoint_dir` (its fp32 masters, read from its
// rank files with their checksums verified) as a bf16 model directory; a LoRA run's checkpoint
// as PEFT's adapter directory instead (checkpoint/peft_adapter.h: the adapters apart from the
// frozen base, fp32). Collective over comm;
// any number of ranks. Errors name the file; on failure every rank throws and nothing is left
// at out_dir.
ConsolidatedModel consolidate_checkpoint(const std::string& checkpoint_dir,
                                         const std::string& out_dir, MpiCommunicator& comm,
                                         const ConsolidateOptions& options);

// Writes a LoRA run's training checkpoint as PEFT's adapter directory (what
// consolidate_checkpoint writes of it; `zerotrain export --format peft`). Not collective. Refused
// naming the directory when it is no training checkpoint or its run had no adapters.
ConsolidatedModel write_checkpoint_adapter(const std::string& checkpoint_dir,
                                           const std::string& out_dir, bool overwrite);

// Writes the engine's current weights as a bf16 model directory. Collective over comm (the
// engine's communicator).
ConsolidatedModel write_consolidated_model(ZeroEngine& engine, const std::string& dir,
                                           MpiCommunicator& comm,
                                           const ConsolidateOptions& options);

}  // namespace zt

#include "checkpoint/consolidate.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <vector>

#include "checkpoint/checkpoint_compatibility.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/peft_adapter.h"
#include "comm/collective_outcome.h"
#include "io/fs_util.h"
#include "io/parallel_model_dir.h"
#include "io/tokenizer_files.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kChunkElems = int64_t{8} << 20;  // fp32 staging bound per write (32 MiB)

bool use_parallel_hdf5(const ConsolidateOptions& options) {
  return !options.serial && ParallelModelDirWriter::available();
}

uint64_t model_bytes(const ParamLayout& layout) {
  return static_cast<uint64_t>(layout.total_numel()) * sizeof(bf16_t);
}

// The part of every tensor (flat element range, tensor coordinates) that this rank writes.
using OwnRangeFn = std::function<ElementRange(const TensorInfo&)>;

// Parallel path: reads this rank's part of every tensor as fp32, a bounded chunk at a time,
// rounds it to bf16 and writes it into the shared shards.
void write_own_ranges(ParallelModelDirWriter& writer, const OwnRangeFn& own_range,
                      const TensorValuesFn& values) {
  std::vector<float> chunk;
  std::vector<bf16_t> packed;
  for (const TensorInfo& t : writer.layout().tensors()) {
    const ElementRange range = own_range(t);
    for (int64_t done = 0; done < range.count; done += kChunkElems) {
      const int64_t n = std::min(kChunkElems, range.count - done);
      chunk.resize(static_cast<size_t>(n));
      packed.resize(static_cast<size_t>(n));
      values(t, range.begin + done, n, chunk.data());
      floats_to_bf16(chunk.data(), packed.data(), static_cast<size_t>(n));
      writer.write(t, range.begin + done, n, packed.data());
    }
  }
}

// Rank r's r-th of `world` equal contiguous slices of [0, numel).
ElementRange even_slice(int64_t numel, int rank, int world) {
  const int64_t per_rank = (numel + world - 1) / world;
  const int64_t begin = std::min(numel, rank * per_rank);
  return {begin, std::min(per_rank, numel - begin)};
}

// Serial engine path: for_each_full_tensor gathers one tensor at a time to rank 0, which writes.
uint64_t write_through_rank0(ZeroEngine& engine, const std::string& dir, Communicator& comm,
                             const ConsolidateOptions& options) {
  std::unique_ptr<ModelDirWriter> writer;
  run_collectively(comm, [&] {
    if (comm.rank() == 0)
      writer = std::make_unique<ModelDirWriter>(dir, engine.model().config(),
                                                options.shard_limit_bytes, options.overwrite);
  });
  std::string error;  // keep visiting (the walk is collective) and report once at the end
  engine.for_each_full_tensor(false, [&](const TensorInfo& t, const void* data) {
    if (!writer || !error.empty()) return;
    try {
      writer->add_tensor(t.name, t.shape, static_cast<const bf16_t*>(data));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  run_collectively(comm, [&] {
    if (!error.empty()) fail(error);
    if (writer) writer->finish();
  });
  return model_bytes(engine.layout());
}

// Reads and checks the training checkpoint at `dir` (its manifest and model); errors name it.
void read_checkpoint_model(const std::string& dir, CheckpointManifest& manifest,
                           ModelConfig& config) {
  std::error_code ec;
  ZT_CHECK(fs::is_directory(dir, ec), "checkpoint directory '" + dir + "' does not exist");
  ZT_CHECK(fs::exists(dir + "/" + kCheckpointManifestFile, ec),
           "'" + dir + "' is not a training checkpoint (no " + kCheckpointManifestFile + ")");
  manifest = CheckpointManifest::read(dir);
  config = ModelConfig::from_hf_json(manifest.model_config, dir + "/" + kCheckpointManifestFile);
  check_checkpoint_model(manifest, config, ParamLayout(config), dir);
}

// The checkpoint's fp32 masters, read from its rank files.
TensorValuesFn checkpoint_masters(CheckpointRangeReader& reader) {
  return [&reader](const TensorInfo& t, int64_t begin, int64_t count, float* out) {
    reader.read(t.group, OptimizerTensor::kMaster, {t.offset + begin, count}, out);
  };
}

// PEFT's adapter directory of a LoRA checkpoint: the adapters and the base tensors that trained.
uint64_t write_adapter_of(const std::string& dir, const CheckpointManifest& manifest,
                          const ModelConfig& config, const std::string& out_dir, bool overwrite) {
  std::vector<std::string> frozen;
  for (const CheckpointTensor& t : manifest.tensors)
    if (t.frozen) frozen.push_back(t.name);
  const ParamLayout layout(config);
  CheckpointRangeReader reader(dir, manifest);
  return write_peft_adapter_dir(out_dir, layout, TrainableSet::from_frozen_names(layout, frozen),
                                "", checkpoint_masters(reader), overwrite);
}

// The tokenizer files saved beside a checkpoint's rank files (CheckpointSaveOptions::
// files_beside), written beside what is made of it, as train writes them into OUT/final/.
void carry_tokenizer_files(const std::string& checkpoint_dir, const std::string& out_dir) {
  write_tokenizer_files(read_tokenizer_files(checkpoint_dir), out_dir);
}

}  // namespace

std::string consolidated_step_dir(const std::string& out_dir, int64_t step) {
  return strip_trailing_slashes(out_dir) + "/" + kConsolidatedSubdir + "/" +
         checkpoint_step_dir_name(step);
}

ConsolidatedModel consolidate_checkpoint(const std::string& checkpoint_dir,
                                         const std::string& out_dir, MpiCommunicator& comm,
                                         const ConsolidateOptions& options) {
  const Stopwatch clock;
  const std::string dir = strip_trailing_slashes(checkpoint_dir);
  const int rank = comm.rank(), world = comm.world_size();
  CheckpointManifest manifest;
  ModelConfig config;
  run_collectively(comm, [&] { read_checkpoint_model(dir, manifest, config); });
  ConsolidatedModel result;
  result.dir = strip_trailing_slashes(out_dir);
  if (config.lora.enabled()) {  // the adapters apart from the (frozen) base: PEFT's directory
    run_collectively(comm, [&] {
      if (rank != 0) return;
      result.bytes = write_adapter_of(dir, manifest, config, result.dir, options.overwrite);
      carry_tokenizer_files(dir, result.dir);
    });
    result.seconds = clock.seconds();
    return result;
  }
  ZT_CHECK(!keeps_frozen_digests(manifest),
           "checkpoint '" + dir +
               "' keeps its frozen tensors as digests, not values (--checkpoint-frozen digest), "
               "so it holds no whole model to consolidate: use the run's final/ or "
               "--save-consolidated-every, or save with --checkpoint-frozen values");
  // Opens (and first verifies the size and CRC-32C of) only the rank files it reads from.
  CheckpointRangeReader reader(dir, manifest);
  const TensorValuesFn masters = checkpoint_masters(reader);
  result.parallel = use_parallel_hdf5(options);
  if (result.parallel) {
    ParallelModelDirWriter writer(result.dir, config, comm, options.shard_limit_bytes,
                                  options.overwrite);
    writer.write_on_every_rank([&] {
      write_own_ranges(
          writer, [&](const TensorInfo& t) { return even_slice(t.numel, rank, world); }, masters);
    });
    result.bytes = writer.finish();
  } else {
    run_collectively(comm, [&] {
      if (rank == 0)
        write_model_dir_streaming(result.dir, config, masters, options.shard_limit_bytes,
                                  options.overwrite);
    });
    result.bytes = model_bytes(ParamLayout(config));
  }
  run_collectively(comm, [&] {
    if (rank == 0) carry_tokenizer_files(dir, result.dir);
  });
  result.seconds = clock.seconds();
  return result;
}

ConsolidatedModel write_checkpoint_adapter(const std::string& checkpoint_dir,
                                           const std::string& out_dir, bool overwrite) {
  const Stopwatch clock;
  const std::string dir = strip_trailing_slashes(checkpoint_dir);
  CheckpointManifest manifest;
  ModelConfig config;
  read_checkpoint_model(dir, manifest, config);
  ZT_CHECK(config.lora.enabled(),
           "'" + dir +
               "' is the checkpoint of a run without LoRA adapters: it has no PEFT "
               "adapter (`zerotrain consolidate` writes its model)");
  ConsolidatedModel result;
  result.dir = strip_trailing_slashes(out_dir);
  result.bytes = write_adapter_of(dir, manifest, config, result.dir, overwrite);
  carry_tokenizer_files(dir, result.dir);
  result.seconds = clock.seconds();
  return result;
}

ConsolidatedModel write_consolidated_model(ZeroEngine& engine, const std::string& dir,
                                           MpiCommunicator& comm,
                                           const ConsolidateOptions& options) {
  engine.apply_delayed_update();  // the held-back update belongs to what is saved
  const Stopwatch clock;
  ConsolidatedModel result;
  result.dir = strip_trailing_slashes(dir);
  // A model with NaN or infinite weights is not written: it would look like a result.
  const std::string poisoned = engine.non_finite_master_tensor();
  if (!poisoned.empty())
    throw AgreedError("model '" + result.dir + "' not written: the master weights of " + poisoned +
                      " are not finite (NaN or infinity); training diverged");
  result.parallel = use_parallel_hdf5(options);
  if (!result.parallel) {
    result.bytes = write_through_rank0(engine, result.dir, comm, options);
    result.seconds = clock.seconds();
    return result;
  }
  // Each rank writes the slice of every group it would save in a training checkpoint, which it
  // holds at every stage (its optimizer shard, or the whole group at stage 0).
  const ParamLayout& layout = engine.layout();
  const int rank = comm.rank();
  const std::vector<CheckpointGroup> groups =
      checkpoint_groups(layout, comm.world_size(), engine.zero_config().shard_alignment());
  // Tensors come in layout order, so groups in order: one group's shard staged at a time.
  int staged_group = -1;
  OptimizerShard shard;
  const OwnRangeFn own_range = [&](const TensorInfo& t) {
    const ElementRange slice =
        groups[static_cast<size_t>(t.group)].ranges[static_cast<size_t>(rank)];
    const int64_t lo = std::max(slice.begin, t.offset);
    const int64_t hi = std::min(slice.end(), t.offset + t.numel);
    return hi > lo ? ElementRange{lo - t.offset, hi - lo} : ElementRange{0, 0};
  };
  const TensorValuesFn masters = [&](const TensorInfo& t, int64_t begin, int64_t count,
                                     float* out) {
    if (t.group != staged_group) {
      if (staged_group >= 0) engine.release_optimizer_shard(staged_group, /*modified=*/false);
      shard = engine.optimizer_shard(t.group);
      staged_group = t.group;
    }
    const int64_t at = t.offset + begin - shard.begin;
    ZT_CHECK(at >= 0 && at + count <= shard.count, "consolidate: rank " + std::to_string(rank) +
                                                       " does not hold its slice of '" + t.name +
                                                       "'");
    std::copy(shard.master + at, shard.master + at + count, out);
  };
  ParallelModelDirWriter writer(result.dir, engine.model().config(), comm,
                                options.shard_limit_bytes, options.overwrite);
  writer.write_on_every_rank([&] { write_own_ranges(writer, own_range, masters); });
  if (staged_group >= 0) engine.release_optimizer_shard(staged_group, /*modified=*/false);
  result.bytes = writer.finish();
  result.seconds = clock.seconds();
  return result;
}

}  // namespace zt

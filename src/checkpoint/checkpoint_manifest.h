// The manifest of a training checkpoint (docs/ARCHITECTURE.md §3): OUT/checkpoints/step-NNNNNNNN/
// manifest.json next to one HDF5 file per rank. It records where training stands (step, tokens,
// data cursor), what it was (world, stage, precision, model config and its fingerprint, the
// hyperparameters a bitwise resume needs), where every byte lives (each group's range in each
// rank file, each tensor's place in its group) and a CRC-32C of every rank file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/loss_scaler.h"
#include "engine/zero_config.h"
#include "io/data_loader.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/trainable.h"

namespace zt {

// Version 2 adds the manifest's own CRC-32C (required from version 2 on), the dataset's identity
// and the metrics line of the checkpoint's step; version 3 frozen groups kept as a digest of
// their values (CheckpointGroup::frozen_values_digest). A manifest is written as version 3 only
// when it keeps a digest (so that earlier builds still read the others), and read up to 3.
constexpr int kCheckpointFormatVersion = 3;
constexpr const char* kFrozenDigestPrefix = "splitmix64-sum:";
constexpr const char* kCheckpointManifestFile = "manifest.json";
// A checkpoint being saved is ROOT/.tmp-step-N… until its final rename publishes it.
constexpr const char* kCheckpointTempPrefix = ".tmp-";

// "step-00000010", "rank-00003.h5", "group_017".
std::string checkpoint_step_dir_name(int64_t step);
// The step of a "step-NNNNNNNN" directory name, or -1 for any other name.
int64_t checkpoint_step_of_dir_name(const std::string& name);
std::string checkpoint_rank_file_name(int rank);
std::string checkpoint_group_name(int group);

// Where training stands after `step` optimizer steps; what a resume restores.
struct TrainingProgress {
  int64_t step = 0;
  int64_t tokens_seen = 0;
  DataCursor cursor;  // next window of the global data order
};

// The settings a resumed run is compared with. The learning-rate schedule (lr, min_lr,
// warmup_steps, total_steps) may change with a warning; the rest must match (see
// check_resume_hyperparameters, checkpoint_compatibility.h).
struct TrainingHyperparameters {
  AdamWConfig optim;
  int64_t total_steps = 0;
  int64_t micro_batch = 0;
  int64_t grad_accum = 0;
  int64_t seq_len = 0;
  uint64_t data_seed = 0;                // seed of the data order (data_loader.h)
  std::string data_identity;             // TokenDataset::identity() ("" in version-1 checkpoints)
  bool world_invariant = false;          // ZeroConfig::world_invariant
  bool world_invariant_recorded = true;  // false: an older checkpoint, which did not record it
  // --deterministic (true in checkpoints written before it was recorded: every run was then)
  bool deterministic = true;
  // What computed the run, so that a resume on other arithmetic warns: the backend ("cpu" |
  // "cuda"), the attention kernel it ran ("cpu": the CPU backend's one; "gemm" | "fused") and the
  // activations' storage ("fp32" | "bf16" | "fp16"). Empty in checkpoints written before they were
  // recorded: a resume then warns once, naming what it computes with. document_masking: "on" |
  // "off" (--document-masking resolved); "off" in checkpoints written before it existed, which
  // attended across documents.
  std::string backend{};
  std::string attention{};
  std::string activations{};
  std::string document_masking = "off";
  // How the data was cut into windows (--packing resolved: "wrapped" | "documents" | "bfd");
  // "wrapped" in checkpoints written before it existed. The data cursor counts these windows.
  std::string packing = "wrapped";

  nlohmann::json to_json() const;
  static TrainingHyperparameters from_json(const nlohmann::json& j);
};

// Elements [begin, begin+count) of a group's flat (unpadded) range.
struct ElementRange {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t end() const { return begin + count; }
};

// Group g of a checkpoint: ranges[r] is what rank file r holds (r·shard clipped to numel).
struct CheckpointGroup {
  int64_t numel = 0;
  int64_t shard = 0;
  std::vector<ElementRange> ranges;
  // A wholly frozen group kept as the digest of its values (checkpoint_files.h's
  // frozen_values_digest, as frozen_digest_text writes it) instead of the values: no rank file
  // holds it. "" when the rank files hold its values.
  std::string frozen_values_digest;
};

struct CheckpointTensor {
  std::string name;
  int group = 0;
  int64_t offset = 0;
  std::vector<int64_t> shape;
  bool frozen = false;  // trained with this tensor frozen (model/trainable.h); "frozen": true
};

struct CheckpointFile {
  std::string name;  // relative to the checkpoint directory
  uint32_t crc32c = 0;
  uint64_t bytes = 0;
};

// fp16 loss scaling where the checkpoint stands (engine/loss_scaler.h): the scaler's state, absent
// when the run had none (bf16, fp32), and the steps skipped on overflow, which Adam's step count
// and the learning-rate schedule leave out. "loss_scaling" in the manifest.
struct LossScalingProgress {
  bool has_scaler = false;
  LossScaler::State scaler;
  LossScaleConfig config;  // the settings the state was reached with (when has_scaler)
  int64_t skipped_steps = 0;
};

// One `train` process in a checkpoint's history: the run (an id each process draws at random)
// that trained the steps after from_step, up to the next entry's from_step. A manifest's lineage
// lists them oldest first, the run that saved it last; the history before its first entry (all of
// it for a checkpoint written before lineages were recorded) counts as the run "". Rotation
// (prune_checkpoints) keeps to it.
struct CheckpointRun {
  std::string id;
  int64_t from_step = 0;
};

// The manifest's "lineage" (empty when absent: an older checkpoint); a malformed one is refused,
// naming `source`.
std::vector<CheckpointRun> read_checkpoint_lineage(const nlohmann::json& manifest,
                                                   const std::string& source);
// The run of `lineage` that trained `step` (the last that started below it; "" if none did).
std::string run_of_step(const std::vector<CheckpointRun>& lineage, int64_t step);

struct CheckpointManifest {
  int format_version = kCheckpointFormatVersion;
  TrainingProgress progress;
  TrainingHyperparameters hyper;
  int world_size = 1;
  int zero_stage = 0;
  std::string precision;
  nlohmann::json model_config;  // Hugging Face config.json object
  std::string config_fingerprint;
  std::vector<CheckpointGroup> groups;
  std::vector<CheckpointTensor> tensors;
  std::vector<CheckpointFile> files;  // files[r] is rank r's file
  // metrics.jsonl's line of this step, written with the checkpoint so that a kill between the
  // checkpoint's commit and the line's write loses nothing (a resume restores it).
  nlohmann::json metrics_line;
  LossScalingProgress loss_scaling;
  std::vector<CheckpointRun> lineage;  // "lineage" (written when not empty)

  // The JSON written to manifest.json: every field above and "manifest_crc32c", the CRC-32C of
  // the rest (the object without that key, dumped compactly), so an edited step or data cursor
  // is refused rather than silently skipping a step or shifting the data.
  nlohmann::json to_json() const;
  // Parses and checks the CRC and internal consistency; errors name `source`.
  static CheckpointManifest from_json(const nlohmann::json& j, const std::string& source);
  static CheckpointManifest read(const std::string& checkpoint_dir);
};

// The rank-file ranges of a layout split over `world` ranks as the engine splits it (shards a
// multiple of `shard_align` elements, ZeroConfig::shard_alignment): ranges[g][r].
std::vector<CheckpointGroup> checkpoint_groups(const ParamLayout& layout, int world,
                                               int64_t shard_align);
std::vector<CheckpointTensor> checkpoint_tensors(const ParamLayout& layout,
                                                 const TrainableSet& trainable = {});

// Whether the checkpoint keeps any frozen group as a digest (format 3): a resume must then load
// the base model the run started from before load_checkpoint, which verifies it.
bool keeps_frozen_digests(const CheckpointManifest& manifest);

// "crc32c:xxxxxxxx" of the model config's canonical JSON (sorted keys, no whitespace).
std::string model_config_fingerprint(const ModelConfig& config);

}  // namespace zt

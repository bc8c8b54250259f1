// Resumable training checkpoints (docs/ARCHITECTURE.md §3):
//
//   OUT/checkpoints/step-NNNNNNNN/manifest.json      (checkpoint/checkpoint_manifest.h)
//   OUT/checkpoints/step-NNNNNNNN/rank-RRRRR.h5      (checkpoint/checkpoint_files.h)
//   OUT/checkpoints/latest                           text: the newest complete directory's name
//
// Every rank writes its own file in parallel: rank r writes elements [r·shard, (r+1)·shard) of
// every group (shard = ceil(numel/N)) — its own optimizer shard at stages 1-3, the same slice of
// its full replica at stage 0 — so the format is the same for every stage.
//
// Crash safety. All ranks write into OUT/checkpoints/.tmp-step-NNNNNNNN/ and fsync their files;
// the ranks agree that every file is complete (a failure anywhere fails every rank); rank 0
// writes the manifest (with every file's CRC-32C), fsyncs it and the directory, renames the
// directory to step-NNNNNNNN, fsyncs the parent, and only then replaces `latest` atomically
// (temporary name, fsync, rename). --keep-last K deletes older complete checkpoints after that.
// A crash or kill at any point leaves the previous checkpoint complete and `latest` naming it;
// a failed save removes the temporary directory.
//
// Loading works at any world size and stage: each rank reads, for each group, the intersection
// of its own range with every saved rank's range (HDF5 hyperslabs), from those files only, after
// verifying their size and CRC-32C.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "checkpoint/checkpoint_manifest.h"
#include "engine/zero_engine.h"

namespace zt {

constexpr const char* kCheckpointsSubdir = "checkpoints";
constexpr const char* kLatestCheckpointFile = "latest";

// OUT/checkpoints.
std::string checkpoints_root(const std::string& out_dir);

// Fault injection for tests of the crash-safety protocol. Defaults come from the environment:
// ZT_DEBUG_FAIL_CHECKPOINT_WRITE=R (rank R's file write fails) and
// ZT_DEBUG_STALL_CHECKPOINT=SECONDS (every rank sleeps with its file half written).
struct CheckpointDebug {
  int fail_write_rank = -1;
  double stall_seconds = 0;
  static CheckpointDebug from_environment();
};

struct CheckpointSaveOptions {
  std::string root;       // OUT/checkpoints
  int64_t keep_last = 0;  // > 0: keep only the newest K complete checkpoints (of this lineage)
  // With keep_last: also keep the complete checkpoint whose metrics line has the lowest eval_loss
  // (the earliest of equal ones), as the Hugging Face Trainer keeps its best checkpoint.
  bool keep_best_eval = false;
  CheckpointDebug debug;
  nlohmann::json metrics_line;  // the step's metrics.jsonl line, kept in the manifest
  // The runs the checkpoint descends from, this process's last (CheckpointManifest::lineage).
  std::vector<CheckpointRun> lineage;
  // --checkpoint-frozen digest: each wholly frozen group is kept as the digest of its values
  // (CheckpointGroup::frozen_values_digest), not the values; a resume reloads the base it started
  // from and verifies it against the digest. Otherwise the values, in their working dtype.
  bool frozen_as_digest = false;
  // Files rank 0 writes whole into the checkpoint directory beside the rank files before it is
  // published (name -> contents): the data's tokenizer files, which `consolidate` and `export
  // --format peft` carry into what they write, as OUT/final/ has them.
  std::map<std::string, std::string> files_beside;
};

struct SavedCheckpoint {
  std::string dir;     // OUT/checkpoints/step-NNNNNNNN
  uint64_t bytes = 0;  // rank files, all ranks
  double seconds = 0;  // wall time of the whole save (as seen by this rank)
};

// Saves the engine's optimizer state and the training progress. Collective over the engine's
// communicator; on failure every rank throws (the message names the file) and the previous
// checkpoint and `latest` are untouched.
SavedCheckpoint save_checkpoint(ZeroEngine& engine, const TrainingProgress& progress,
                                const TrainingHyperparameters& hyper,
                                const CheckpointSaveOptions& options);

// Rank 0, after publishing `keep_dir` under `root`: among the complete checkpoints (those with a
// manifest) of keep_dir's lineage up to its step, those its runs saved, removes all but the newest
// `keep_last` (when > 0), `keep_dir` and, with keep_best_eval, the one of the lowest finite
// eval_loss in its manifest's metrics line. Any other directory (a resume's abandoned steps, an
// unreadable manifest) is left alone. Names the directory it cannot list.
void prune_checkpoints(const std::string& root, int64_t keep_last, bool keep_best_eval,
                       const std::string& keep_dir);

// Rank 0: OUT/checkpoints/latest names the complete checkpoint `dir` (in that directory), replaced
// atomically and fsynced.
void point_latest_at(const std::string& dir);

// A fresh random id for this process's run in its checkpoints' lineage.
std::string new_checkpoint_run_id();

// The checkpoint a PATH names, as DeepSpeed's load_checkpoint and zero_to_fp32 read a directory
// through its `latest` tag: PATH itself when it holds a manifest; else the checkpoint `latest`
// names where PATH is that file, a checkpoints root holding it, or a run's output directory
// (OUT/checkpoints/latest); else PATH (whose reader then refuses it naming it).
std::string checkpoint_dir_through_latest(const std::string& path);

// The checkpoint directory that --resume MODE names: "none" gives ""; "auto" gives the one
// OUT/checkpoints/latest names or, without `latest`, the newest complete checkpoint (a save
// interrupted before it wrote `latest`, as a Hugging Face or torchtitan run picks its last; then
// *fallback_note says so), or "" when there is none; anything else is a checkpoint, found through
// checkpoint_dir_through_latest, which must hold a manifest.
std::string resolve_resume_checkpoint(const std::string& mode, const std::string& out_dir,
                                      std::string* fallback_note = nullptr);
// An error saying that a readable checkpoint does not fit this run (a setting that differs),
// which the run's other checkpoints would not fit either.
class CheckpointMismatch : public Error {
 public:
  using Error::Error;
};

// Runs `read` on the checkpoint `dir` that --resume MODE chose in `out_dir` ("" when `latest` did
// not name one). With MODE auto, an error it raises (a damaged or missing file) gets, appended,
// the newest other complete checkpoint there, which --resume PATH continues from; the error keeps
// its type (AgreedError or Error). A CheckpointMismatch passes as it is.
void read_checkpoint_to_resume(const std::string& mode, const std::string& out_dir,
                               const std::string& dir, const std::function<void()>& read);

// Whether loading `manifest` into `engine` continues its fp16 loss scaler: both have one and its
// settings are the same. Otherwise the run's scaler starts afresh from its own settings (a
// resume that changes them, or that switches to fp16, means to).
bool resumed_loss_scaler(const CheckpointManifest& manifest, const ZeroEngine& engine);

// Loads a checkpoint into the engine: checks the model (config key by key, tensor layout), runs
// `check` on the manifest (e.g. hyperparameter comparisons; it may throw), restores this rank's
// master/m/v range from the files that hold it, verifying their checksums, and rebuilds the
// working parameters. A frozen group kept as a digest keeps the values the engine holds, which
// must digest to the checkpoint's (else every rank throws, naming the group's tensors, and the
// precisions when the run's differs: the same base may round to other values in it).
// Collective; on failure every rank throws.
CheckpointManifest load_checkpoint(
    ZeroEngine& engine, const std::string& dir,
    const std::function<void(const CheckpointManifest&)>& check = nullptr);

}  // namespace zt

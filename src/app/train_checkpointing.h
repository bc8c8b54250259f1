// The checkpoint side of `zerotrain train`: --save-every / --keep-last / --resume, the stop on
// SIGUSR1/SIGTERM (save, exit 124), and the fault-injection flags the crash-safety tests use.
// cmd_train calls resume() once before the loop, before_step() and after_step() around each step.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "app/cli.h"
#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "engine/zero_engine.h"
#include "io/data_loader.h"
#include "io/token_dataset.h"
#include "runtime/signals.h"
#include "util/word_choice.h"

namespace zt {

// --checkpoint-frozen: how a checkpoint keeps a wholly frozen group (LoRA's base, --freeze's
// tensors). auto: as a digest when the run trains LoRA adapters (the base is the model it
// started from, as PEFT's checkpoints and DeepSpeed's exclude_frozen_parameters leave it out),
// as values otherwise (`consolidate` of a checkpoint writes the whole model).
enum class FrozenInCheckpoint { kAuto, kValues, kDigest };
inline constexpr WordChoice<FrozenInCheckpoint> kFrozenInCheckpointWords[] = {
    {FrozenInCheckpoint::kAuto, "auto"},
    {FrozenInCheckpoint::kValues, "values"},
    {FrozenInCheckpoint::kDigest, "digest"}};

struct CheckpointFlags {
  int64_t save_every = 0;          // 0: no periodic checkpoints
  int64_t keep_last = 0;           // 0: keep all
  bool keep_best = false;          // with keep_last: also keep the lowest eval_loss's checkpoint
  std::string resume = "none";     // none | auto | PATH
  int64_t stop_after_step = 0;     // > 0: behave as if signalled after that step
  bool allow_data_change = false;  // resume on another dataset than the checkpoint's
  std::string frozen = "auto";     // --checkpoint-frozen: a kFrozenInCheckpointWords word
  int64_t debug_kill_rank = -1, debug_kill_step = 0;
  CheckpointDebug debug = CheckpointDebug::from_environment();
};

// Registers the flags above on a command's options.
void add_checkpoint_options(po::options_description& options, CheckpointFlags& flags);
// The fault-injection options the tests use (--debug-*), for a separate --help group.
void add_fault_injection_options(po::options_description& options, CheckpointFlags& flags);
void validate_checkpoint_flags(const CheckpointFlags& flags, const std::string& command);
// --checkpoint-frozen alone (estimate takes it too), and whether a checkpoint keeps wholly frozen
// groups as digests under its `word`, for a run with or without LoRA adapters.
void add_checkpoint_frozen_option(po::options_description& options, std::string* word);
bool frozen_as_digest(const std::string& word, bool lora);

// --resume auto found no checkpoint in OUT, so the run starts afresh there: refused when OUT
// holds a finished run (final/), which it would replace; --overwrite starts afresh anyway. A run
// that stopped before its first checkpoint is started again, beside whatever else a job script
// wrote there (the Slurm scripts' slurm-env files).
void check_fresh_start_in(const std::string& out_dir, bool overwrite);
// The manifest of the checkpoint `dir` a resume continues (read_checkpoint_to_resume's hint on a
// damaged one); refused when its step is past --steps (`steps`), naming what would go on from it.
CheckpointManifest manifest_to_resume(const CheckpointFlags& flags, const std::string& out_dir,
                                      const std::string& dir, int64_t steps);
// Whether the run starts OUT afresh (what --overwrite then clears): without --resume, or with a
// `checkpoint` (resolved from `resume_mode`; "" when none) from outside OUT, whose continuation is
// a new run there; refused when OUT holds a run of its own without --overwrite, as the two would
// mix. A checkpoint of OUT's own run continues it; --resume auto that found none is
// check_fresh_start_in's.
bool starts_afresh_in(const std::string& out_dir, const std::string& resume_mode,
                      const std::string& checkpoint, bool overwrite);
// A resume whose settings differ from those of the run that wrote OUT/final/ (`record`: this run's
// run.json) would leave that model beside a run.json that no longer describes it: both move to
// OUT/previous-N/ first, with a copy of its metrics.jsonl and report (the continuation's log drops
// the steps past the resumed one), and the continuation says so, naming the settings that changed.
void archive_diverged_final(const std::string& out, const nlohmann::json& record);
// The --packing a run trains with: auto on a resume continues the checkpoint's packing (a run
// from before the option was wrapped), so that the command line that started a run resumes it;
// otherwise `requested` resolved for `data` (resolve_packing).
Packing packing_for_run(Packing requested, const CheckpointFlags& flags, const std::string& out_dir,
                        const TokenDataset& data);

class TrainCheckpointing {
 public:
  // Installs the stop-signal handlers. resume_dir: the checkpoint --resume resolved to
  // (resolve_resume_checkpoint; "" to start fresh). files_beside: written into every checkpoint
  // (CheckpointSaveOptions::files_beside; the data's tokenizer files).
  TrainCheckpointing(const CheckpointFlags& flags, const std::string& out_dir,
                     const TrainingHyperparameters& hyper, Communicator& comm,
                     std::string resume_dir, std::map<std::string, std::string> files_beside);

  // The checkpoint this run resumes ("" when it starts fresh).
  const std::string& resume_dir() const { return resume_dir_; }
  // Loads resume_dir() into the engine (collective) after checking the run's settings against
  // it; rank 0 prints warnings and the load time and, when it lies in this run's
  // OUT/checkpoints, points `latest` at it (a kill before the next save resumes this branch, not
  // an abandoned later one). Returns the restored progress.
  TrainingProgress resume(ZeroEngine& engine);
  // The metrics.jsonl line the resumed checkpoint carries (null before resume() or in an old one).
  const nlohmann::json& resumed_metrics_line() const { return resumed_metrics_line_; }

  // --debug-kill-rank/--debug-kill-step: that rank dies by SIGKILL at the start of that step.
  void before_step(int64_t step) const;
  // After step `progress.step`: agrees on stop requests, saves when due (with `metrics_line`, the
  // step's metrics.jsonl line). Returns true when the run must stop now (the caller exits with
  // kStoppedExitCode). Collective.
  bool after_step(ZeroEngine& engine, const TrainingProgress& progress,
                  const nlohmann::json& metrics_line);

 private:
  void save(ZeroEngine& engine, const TrainingProgress& progress,
            const nlohmann::json& metrics_line);

  CheckpointFlags flags_;
  std::string out_dir_;
  TrainingHyperparameters hyper_;
  Communicator& comm_;
  StopSignalHandlers signal_handlers_;
  std::string resume_dir_;
  nlohmann::json resumed_metrics_line_;
  // The runs this run's checkpoints descend from, its own last (a fresh id; after resume(), the
  // resumed checkpoint's lineage before it).
  std::vector<CheckpointRun> lineage_;
  std::map<std::string, std::string> files_beside_;
};

// A resume that found OUT's run finished at `step` (rank 0): says so; warns when the run.json there
// records another layout (world size, ZeRO stage, batch shape, checkpointing, precision, offload)
// than `asked` (the run's options as run.json's "config" records them) at `world`, which therefore
// trained nothing; else marks OUT/report.json current as of this run, whose script reads a report
// newer than its launch as the run's success (slurm/common.sh: a requeue of a job that had
// finished).
void announce_finished_run(const std::string& out, const nlohmann::json& asked, int world,
                           int64_t step);

}  // namespace zt

#include "app/train_checkpointing.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_compatibility.h"
#include "comm/collective_outcome.h"
#include "engine/zero_config.h"
#include "io/fs_util.h"
#include "io/run_directory.h"
#include "runtime/signals.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// Collective over comm: SIGTERM when any rank received SIGTERM, else SIGUSR1 when any rank
// received SIGUSR1, else 0.
int stop_requested_anywhere(Communicator& comm) {
  // Sum of one-hot flags per kind keeps the op a plain sum (the only reduction comm offers).
  const int received = received_stop_signal();
  int32_t seen[2] = {received == SIGUSR1 ? 1 : 0, received == SIGTERM ? 1 : 0};
  comm.all_reduce_sum_blocking(seen, 2);
  if (seen[1] > 0) return SIGTERM;
  if (seen[0] > 0) return SIGUSR1;
  return 0;
}

}  // namespace

void add_checkpoint_options(po::options_description& options, CheckpointFlags& f) {
  auto add = options.add_options();
  add("save-every", po::value(&f.save_every)->default_value(f.save_every),
      "save a resumable checkpoint every N steps and after the last (0 = never)");
  add("keep-last", po::value(&f.keep_last)->default_value(f.keep_last),
      "keep only the newest K complete checkpoints of this run's branch (0 = all)");
  add("keep-best", bool_flag(&f.keep_best, false),
      "with --keep-last, also keep the checkpoint of the lowest eval_loss (--eval-every; "
      "--save-every a multiple of it)");
  add("resume", po::value(&f.resume)->default_value(f.resume),
      "none | auto (OUT/checkpoints/latest, if any) | PATH of a checkpoint directory (a run's "
      "OUT, its checkpoints/ or their latest: the checkpoint latest names)");
  add("stop-after-step", po::value(&f.stop_after_step)->default_value(f.stop_after_step),
      "save a checkpoint after step S (below --steps) and exit 124, as on SIGUSR1 (0 = off)");
  add("allow-data-change", bool_flag(&f.allow_data_change, false),
      "resume from a checkpoint written on another dataset (refused by default)");
  add_checkpoint_frozen_option(options, &f.frozen);
}

void add_checkpoint_frozen_option(po::options_description& options, std::string* word) {
  options.add_options()("checkpoint-frozen", po::value(word)->default_value(*word),
                        "auto | values | digest: keep wholly frozen tensors in checkpoints as "
                        "their values, or as a digest that a resume verifies after loading the "
                        "base again (auto: digest with LoRA adapters, values otherwise)");
}

void add_fault_injection_options(po::options_description& options, CheckpointFlags& f) {
  auto add = options.add_options();
  add("debug-kill-rank", po::value(&f.debug_kill_rank)->default_value(f.debug_kill_rank),
      "fault injection: this rank kills itself (SIGKILL) at --debug-kill-step");
  add("debug-kill-step", po::value(&f.debug_kill_step)->default_value(f.debug_kill_step),
      "fault injection: step at whose start --debug-kill-rank dies");
  add("debug-fail-checkpoint-write",
      po::value(&f.debug.fail_write_rank)->default_value(f.debug.fail_write_rank),
      "fault injection: this rank's checkpoint file write fails (env "
      "ZT_DEBUG_FAIL_CHECKPOINT_WRITE)");
  add("debug-stall-checkpoint",
      po::value(&f.debug.stall_seconds)->default_value(f.debug.stall_seconds),
      "fault injection: sleep SECONDS with the rank files half written (env "
      "ZT_DEBUG_STALL_CHECKPOINT)");
}

void validate_checkpoint_flags(const CheckpointFlags& f, const std::string& command) {
  auto at_least_zero = [&](double v, const char* option) {
    ZT_CHECK(v >= 0, command + ": --" + option + " must be >= 0, got " + std::to_string(v));
  };
  at_least_zero(static_cast<double>(f.save_every), "save-every");
  at_least_zero(static_cast<double>(f.keep_last), "keep-last");
  at_least_zero(static_cast<double>(f.stop_after_step), "stop-after-step");
  at_least_zero(f.debug.stall_seconds, "debug-stall-checkpoint");
  ZT_CHECK(!f.keep_best || (f.keep_last > 0 && f.save_every > 0),
           command +
               ": --keep-best needs --keep-last K > 0 and --save-every N > 0: it keeps one "
               "checkpoint more than --keep-last would");
  ZT_CHECK(!f.resume.empty(), command + ": --resume must be none, auto or a checkpoint directory");
  parse_word(f.frozen, kFrozenInCheckpointWords, command + ": --checkpoint-frozen");
}

bool frozen_as_digest(const std::string& word, bool lora) {
  const FrozenInCheckpoint choice =
      parse_word(word, kFrozenInCheckpointWords, "--checkpoint-frozen");
  return choice == FrozenInCheckpoint::kDigest || (choice == FrozenInCheckpoint::kAuto && lora);
}

void check_fresh_start_in(const std::string& out_dir, bool overwrite) {
  std::error_code ec;
  ZT_CHECK(overwrite || !fs::exists(fs::path(out_dir) / "final", ec),
           "--resume auto found no checkpoint in '" + out_dir +
               "', so it would start afresh there, but it holds a finished run (final/) that a "
               "new one would replace; give --overwrite to start afresh anyway");
}

namespace {

// The options that do not change what a run computes: where it writes, how often it logs and
// saves, how it waits; and --epochs and --warmup-ratio, whose steps and warmup_steps are
// compared. A resume that changes any other one continues on another trajectory.
bool changes_trajectory(const std::string& key, const nlohmann::json& config) {
  // clang-format off
  static const std::set<std::string> volatile_keys = {
      "checkpoint_frozen", "comm_timeout", "cuda_graphs", "eval_batches", "eval_data", "eval_every",
      "gemm_algorithms", "keep_best", "keep_last", "log_every", "out", "overwrite", "resume",
      "save_consolidated_every", "save_every", "nvme_path", "offload_buffer_count", "host_adam",
      "offload_optimizer_overlap", "profile_steps", "epochs", "warmup_ratio"};
  // clang-format on
  // With the delayed update, a save or an evaluation applies the update held back: where they
  // fall is part of the trajectory.
  if ((key == "save_every" || key == "save_consolidated_every" || key == "eval_every") &&
      config.value("offload_optimizer_delay", 0) > 0)
    return true;
  // --deterministic changes only the fused attention's backward.
  if (key == "deterministic") return config.value("attention_kernel", "") == "fused";
  // The warm-up of a delay that is off (a run.json from before the option was refused alone).
  if (key == "offload_optimizer_delay_after") return config.value("offload_optimizer_delay", 0) > 0;
  return !volatile_keys.count(key);
}

// An option's value in an earlier run.json; one that release did not have yet ran as its
// default then (plain causal attention, no delayed update).
nlohmann::json value_before(const nlohmann::json& before, const std::string& key) {
  static const std::map<std::string, nlohmann::json> added_later = {
      {"document_masking", "off"},
      {"deterministic", true},
      {"eval_every", 0},
      {"packing", "wrapped"},
      {"offload_gradient_copies", "fp32"},
      {"offload_optimizer_delay", 0},
      {"offload_optimizer_delay_after", OffloadConfig{}.delay_after}};
  const auto it = added_later.find(key);
  if (it != added_later.end() && !before.contains(key)) return it->second;
  return before.value(key, nlohmann::json());
}

}  // namespace

// A resume whose settings differ from those of the run that wrote OUT/final/ would leave that
// model beside a run.json that no longer describes it: both move to OUT/previous-N/ first, with
// a copy of its metrics.jsonl and report, and the continuation says so, naming the settings that
// changed.
void archive_diverged_final(const std::string& out, const nlohmann::json& record) {
  namespace fs = std::filesystem;
  if (!fs::exists(out + "/final") || !fs::exists(out + "/run.json")) return;
  const nlohmann::json previous = read_json_file(out + "/run.json");
  const nlohmann::json before = previous.value("config", nlohmann::json::object());
  const nlohmann::json& now = record.at("config");
  std::string changed;
  for (const auto& [key, value] : now.items())
    if (changes_trajectory(key, now) && value_before(before, key) != value)
      changed += (changed.empty() ? "" : ", ") + key;
  if (changed.empty()) return;
  int n = 1;
  while (fs::exists(out + "/previous-" + std::to_string(n))) ++n;
  const std::string dir = out + "/previous-" + std::to_string(n);
  fs::create_directories(dir);
  move_into_place(out + "/final", dir + "/final", false);
  write_text_file(dir + "/run.json", previous.dump(2) + "\n");
  // Its metrics past the resumed step, which the continuation's log drops, and its report.
  std::error_code ec;
  for (const char* file : {"metrics.jsonl", "report.json", "report.md"})
    if (fs::exists(out + "/" + file, ec))
      fs::copy_file(out + "/" + file, dir + "/" + file, fs::copy_options::overwrite_existing);
  std::cerr << "zerotrain train: note: this continuation changes " << changed
            << " from the run that wrote " << out << "/final; that model, its run.json, "
            << "metrics and report moved to " << dir << "/\n";
}

CheckpointManifest manifest_to_resume(const CheckpointFlags& flags, const std::string& out_dir,
                                      const std::string& dir, int64_t steps) {
  CheckpointManifest manifest;
  read_checkpoint_to_resume(flags.resume, out_dir, dir,
                            [&] { manifest = CheckpointManifest::read(dir); });
  const std::string at = std::to_string(manifest.progress.step);
  ZT_CHECK(manifest.progress.step <= steps,
           "the checkpoint '" + dir + "' is at step " + at + ", past --steps " +
               std::to_string(steps) + ": give --steps " + at + " or more to finish its run, " +
               "--resume an earlier one, or `zerotrain consolidate` it into a model");
  return manifest;
}

bool starts_afresh_in(const std::string& out_dir, const std::string& resume_mode,
                      const std::string& checkpoint, bool overwrite) {
  if (checkpoint.empty()) return resume_mode == "none";
  if (resume_mode == "auto") return false;  // OUT's own checkpoints, wherever they are mounted
  // OUT's own: under OUT (symlinks resolved), or in the directory OUT/checkpoints is (a link to
  // scratch storage).
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(out_dir, ec), at = fs::weakly_canonical(checkpoint, ec);
  const auto [out_end, at_end] = std::mismatch(out.begin(), out.end(), at.begin(), at.end());
  if (out_end == out.end()) return false;
  if (fs::equivalent(at.parent_path(), checkpoints_root(out_dir), ec) && !ec) return false;
  ZT_CHECK(overwrite || !holds_zerotrain_run(out_dir),
           "output directory '" + out_dir + "' holds a run of its own, and --resume '" +
               resume_mode + "' is a checkpoint from elsewhere, whose continuation would mix " +
               "with it: --resume auto continues the run there; --overwrite replaces it with " +
               "the continuation of '" + checkpoint + "'; or give another --out");
  return true;
}

TrainCheckpointing::TrainCheckpointing(const CheckpointFlags& flags, const std::string& out_dir,
                                       const TrainingHyperparameters& hyper, Communicator& comm,
                                       std::string resume_dir,
                                       std::map<std::string, std::string> files_beside)
    : flags_(flags),
      out_dir_(out_dir),
      hyper_(hyper),
      comm_(comm),
      resume_dir_(std::move(resume_dir)),
      lineage_{CheckpointRun{new_checkpoint_run_id(), 0}},
      files_beside_(std::move(files_beside)) {
  write_pid_file_if_requested(comm_.rank());  // tests signal one rank by its pid
}

Packing packing_for_run(Packing requested, const CheckpointFlags& flags, const std::string& out_dir,
                        const TokenDataset& data) {
  if (requested == Packing::kAuto && flags.resume != "none") {
    const std::string checkpoint = resolve_resume_checkpoint(flags.resume, out_dir);
    if (!checkpoint.empty()) {
      std::string packing;
      read_checkpoint_to_resume(flags.resume, out_dir, checkpoint, [&] {
        packing = CheckpointManifest::read(checkpoint).hyper.packing;
      });
      const Packing saved = parse_packing(packing);
      ZT_CHECK(saved == Packing::kWrapped || data.has_documents(),
               std::string("train: --packing auto continues the packing of checkpoint '") +
                   checkpoint + "', " + packing_name(saved) + ", but token dataset '" +
                   data.path() +
                   "' records no document boundaries (/doc_starts) to pack by; give --packing "
                   "wrapped (with --allow-data-change) or data prepared by this version");
      return saved;
    }
  }
  return resolve_packing(requested, data);
}

TrainingProgress TrainCheckpointing::resume(ZeroEngine& engine) {
  const Stopwatch clock;
  const int world = comm_.world_size();
  const std::string precision = precision_name(engine.precision());
  std::vector<std::string> warnings;
  CheckpointManifest manifest;
  read_checkpoint_to_resume(flags_.resume, out_dir_, resume_dir_, [&] {
    manifest = load_checkpoint(engine, resume_dir_, [&](const CheckpointManifest& m) {
      try {
        warnings = check_resume_hyperparameters(m, hyper_, world, precision, resume_dir_,
                                                flags_.allow_data_change);
      } catch (const Error& e) {
        throw CheckpointMismatch(e.what());
      }
    });
  });
  const double seconds = clock.seconds();
  // The stages reduce a step's gradients (or their norm) in orders of their own at several ranks;
  // a new world size is warned of above.
  const int stage = engine.zero_config().stage;
  if (manifest.zero_stage != stage && manifest.world_size == world && world > 1 &&
      !hyper_.world_invariant)
    warnings.push_back("zero_stage: checkpoint " + std::to_string(manifest.zero_stage) + ", run " +
                       std::to_string(stage) + " at " + std::to_string(world) +
                       " ranks without --world-invariant (each stage sums a step's gradients and "
                       "their norm in an order of its own): the continuation may differ in the "
                       "last bits from an uninterrupted run at either stage");
  if (comm_.rank() == 0) {
    for (const std::string& w : warnings)
      std::fprintf(stderr, "warning: resuming from %s: %s\n", resume_dir_.c_str(), w.c_str());
    std::fprintf(stderr,
                 "resumed from %s at step %lld (saved by %d rank%s at ZeRO stage %d; loaded in "
                 "%.3f s)\n",
                 resume_dir_.c_str(), static_cast<long long>(manifest.progress.step),
                 manifest.world_size, manifest.world_size == 1 ? "" : "s", manifest.zero_stage,
                 seconds);
  }
  if (comm_.rank() == 0 && engine.loss_scaler() && !resumed_loss_scaler(manifest, engine))
    std::fprintf(stderr, "warning: resuming from %s: %s; the loss scale starts afresh at %g\n",
                 resume_dir_.c_str(),
                 manifest.loss_scaling.has_scaler
                     ? "the fp16 loss-scaling settings differ from the checkpoint's"
                     : "the checkpoint was not trained in fp16",
                 engine.loss_scaler()->scale());
  resumed_metrics_line_ = manifest.metrics_line;
  const CheckpointRun own{lineage_.back().id, manifest.progress.step};
  lineage_ = manifest.lineage;
  lineage_.push_back(own);
  std::error_code ec;
  if (comm_.rank() == 0 && fs::equivalent(dir_parent(resume_dir_), checkpoints_root(out_dir_), ec))
    point_latest_at(resume_dir_);
  return manifest.progress;
}

void TrainCheckpointing::before_step(int64_t step) const {
  if (flags_.debug_kill_rank == comm_.rank() && flags_.debug_kill_step == step) {
    std::fprintf(stderr, "rank %d: --debug-kill-rank: SIGKILL at the start of step %lld\n",
                 comm_.rank(), static_cast<long long>(step));
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

void TrainCheckpointing::save(ZeroEngine& engine, const TrainingProgress& progress,
                              const nlohmann::json& metrics_line) {
  CheckpointSaveOptions options;
  options.metrics_line = metrics_line;
  options.root = checkpoints_root(out_dir_);
  options.keep_last = flags_.keep_last;
  options.lineage = lineage_;
  options.keep_best_eval = flags_.keep_best;
  options.debug = flags_.debug;
  options.files_beside = files_beside_;
  options.frozen_as_digest =
      frozen_as_digest(flags_.frozen, engine.model().config().lora.enabled());
  const SavedCheckpoint saved = save_checkpoint(engine, progress, hyper_, options);
  if (comm_.rank() == 0)
    std::fprintf(stderr, "checkpoint %s saved (%.2f MiB in %d files, %.3f s)\n", saved.dir.c_str(),
                 static_cast<double>(saved.bytes) / (1 << 20), comm_.world_size(), saved.seconds);
}

bool TrainCheckpointing::after_step(ZeroEngine& engine, const TrainingProgress& progress,
                                    const nlohmann::json& metrics_line) {
  const int signal_number = stop_requested_anywhere(comm_);
  const bool last = progress.step >= hyper_.total_steps;
  const bool stop_flag = flags_.stop_after_step > 0 && progress.step == flags_.stop_after_step;
  const bool stop = !last && (signal_number != 0 || stop_flag);
  const bool periodic = flags_.save_every > 0 && (progress.step % flags_.save_every == 0 || last);
  if (stop || periodic) save(engine, progress, metrics_line);
  if (stop && comm_.rank() == 0)
    std::fprintf(stderr, "stopped after step %lld (%s); resume with --resume auto\n",
                 static_cast<long long>(progress.step),
                 signal_number ? stop_signal_name(signal_number).c_str() : "--stop-after-step");
  return stop;
}

void announce_finished_run(const std::string& out, const nlohmann::json& asked, int world,
                           int64_t step) {
  std::cerr << "checkpoint is at step " << step << " of " << step << ": nothing to train\n";
  std::error_code ec;
  const std::string path = out + "/run.json";
  const nlohmann::json recorded =
      std::filesystem::exists(path, ec) ? read_json_file(path) : nlohmann::json::object();
  std::string differ;
  const auto compare = [&](const std::string& key, const nlohmann::json& then,
                           const nlohmann::json& now) {
    if (then.is_null() || then == now) return;
    differ += (differ.empty() ? "" : ", ") + key + " " + then.dump() + " (now " + now.dump() + ")";
  };
  compare("world_size", recorded.value("world_size", nlohmann::json()), world);
  const nlohmann::json config = recorded.value("config", nlohmann::json::object());
  for (const char* key : {"zero_stage", "micro_batch", "grad_accum", "activation_checkpointing",
                          "precision", "offload_optimizer", "offload_param"})
    compare(key, config.value(key, nlohmann::json()), asked.value(key, nlohmann::json()));
  if (differ.empty()) {  // the run this invocation describes is complete
    // Its time set by the file system, as the script's own files' are (not this host's clock).
    const std::string report = out + "/report.json";
    if (utimensat(AT_FDCWD, report.c_str(), nullptr, 0) != 0)
      std::cerr << "note: " << report << " could not be marked current (" << std::strerror(errno)
                << "): the run that trained here wrote none\n";
    return;
  }
  std::cerr << "warning: " << out << " holds a finished run with " << differ
            << ": this invocation trained nothing (give another --out, or --overwrite to train "
               "afresh)\n";
}

}  // namespace zt

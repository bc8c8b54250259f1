#include "checkpoint/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/checkpoint_compatibility.h"
#include "checkpoint/checkpoint_files.h"
#include "comm/collective_outcome.h"
#include "io/fs_util.h"
#include "io/tokenizer_files.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  ZT_CHECK(!ec, "cannot remove '" + path + "': " + ec.message());
}

// Rank 0, before any rank writes: OUT/checkpoints exists, leftovers of interrupted saves (their
// directories, and `latest`'s temporary files) are gone, and an empty temporary directory waits.
void prepare_temp_dir(const std::string& root, const std::string& tmp) {
  std::error_code ec;
  fs::create_directories(root, ec);
  ZT_CHECK(!ec, "cannot create checkpoint directory '" + root + "': " + ec.message());
  const std::string latest_tmp = std::string(kLatestCheckpointFile) + kCheckpointTempPrefix;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kCheckpointTempPrefix, 0) == 0 || name.rfind(latest_tmp, 0) == 0)
      remove_tree(entry.path().string());
  }
  ZT_CHECK(!ec, "cannot list checkpoint directory '" + root + "': " + ec.message());
  fs::create_directory(tmp, ec);
  ZT_CHECK(!ec, "cannot create '" + tmp + "': " + ec.message());
}

// This rank's slice of group g: elements [r·shard, (r+1)·shard) ∩ [0, numel), taken from the
// optimizer state it holds (which contains that slice at every stage).
OptimizerSlice own_slice(ZeroEngine& engine, const std::vector<CheckpointGroup>& groups, int rank,
                         int g) {
  const OptimizerShard held = engine.optimizer_shard(g);
  const ElementRange range = groups[static_cast<size_t>(g)].ranges[static_cast<size_t>(rank)];
  ZT_CHECK(
      range.count == 0 || (range.begin >= held.begin && range.end() <= held.begin + held.count),
      "checkpoint: rank " + std::to_string(rank) + " does not hold its slice of group " +
          std::to_string(g));
  const int64_t at = range.count == 0 ? 0 : range.begin - held.begin;
  if (held.m == nullptr)  // frozen: its values, in the working dtype that holds them
    return {g, range, held.master + at, nullptr, nullptr, held.values_dtype};
  return {g, range, held.master + at, held.m + at, held.v + at};
}

// Rank 0, after every rank file is complete: manifest, rename, `latest`, pruning.
void publish(const CheckpointManifest& manifest, const std::string& tmp,
             const std::string& final_dir, const CheckpointSaveOptions& options) {
  for (const auto& [name, contents] : options.files_beside)
    write_tokenizer_file(tmp, name, contents);
  write_text_file(tmp + "/" + kCheckpointManifestFile, manifest.to_json().dump(1) + "\n");
  fsync_path(tmp);
  move_into_place(tmp, final_dir, /*overwrite=*/true);  // fsyncs the parent
  point_latest_at(final_dir);
  try {  // the checkpoint is in place: a failure to remove older ones does not undo it
    prune_checkpoints(options.root, options.keep_last, options.keep_best_eval, final_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: checkpoint %s saved, but pruning older ones failed: %s\n",
                 final_dir.c_str(), e.what());
  }
}

// A complete checkpoint's manifest as rotation reads it: the run that saved it and the eval_loss
// of its metrics line (NaN: none). Not CRC-checked: nothing is loaded from it.
struct RecordedCheckpoint {
  bool readable = false;  // an object with a well-formed lineage
  std::string run;
  double eval_loss = NAN;
};

RecordedCheckpoint read_recorded(const std::string& dir) {
  RecordedCheckpoint recorded;
  const std::string path = dir + "/" + kCheckpointManifestFile;
  try {
    const nlohmann::json manifest = read_json_file(path);
    if (!manifest.is_object()) return recorded;
    const std::vector<CheckpointRun> lineage = read_checkpoint_lineage(manifest, path);
    recorded.run = lineage.empty() ? "" : lineage.back().id;
    const nlohmann::json line = manifest.value("metrics_line", nlohmann::json());
    const auto it = line.is_object() ? line.find("eval_loss") : line.end();
    if (it != line.end() && it->is_number()) recorded.eval_loss = it->get<double>();
  } catch (const Error&) {
    return recorded;
  }
  recorded.readable = true;
  return recorded;
}

// The complete checkpoints under `root`: each step-N directory that holds a manifest.
struct CompleteCheckpoint {
  int64_t step;
  fs::path dir;
};
std::vector<CompleteCheckpoint> complete_checkpoints(const std::string& root) {
  std::vector<CompleteCheckpoint> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = checkpoint_step_of_dir_name(entry.path().filename().string());
    if (step >= 0 && fs::exists(entry.path() / kCheckpointManifestFile))
      found.push_back({step, entry.path()});
  }
  ZT_CHECK(!ec || ec == std::errc::no_such_file_or_directory,
           "cannot list checkpoint directory '" + root + "': " + ec.message());
  return found;
}

// The newest complete checkpoint under `root` but the one named `except`, or "".
std::string newest_complete_checkpoint(const std::string& root, const std::string& except = "") {
  int64_t newest = -1;
  for (const CompleteCheckpoint& found : complete_checkpoints(root))
    if (found.dir.filename().string() != except) newest = std::max(newest, found.step);
  return newest < 0 ? "" : root + "/" + checkpoint_step_dir_name(newest);
}

}  // namespace

void point_latest_at(const std::string& dir) {
  const std::string root = dir_parent(dir);
  const std::string latest = root + "/" + kLatestCheckpointFile;
  const std::string latest_tmp = temp_sibling(latest);
  write_text_file(latest_tmp, fs::path(strip_trailing_slashes(dir)).filename().string() + "\n");
  std::error_code ec;
  fs::rename(latest_tmp, latest, ec);
  ZT_CHECK(!ec, "cannot rename '" + latest_tmp + "' to '" + latest + "': " + ec.message());
  fsync_path(root);
}

void prune_checkpoints(const std::string& root, int64_t keep_last, bool keep_best_eval,
                       const std::string& keep_dir) {
  if (keep_last <= 0) return;
  // This run's complete checkpoints, newest first: those up to the one just published that its
  // lineage's runs saved. A resume from an older checkpoint leaves the abandoned run's later
  // ones; they are neither counted nor removed (a later save of the same step replaces each).
  const int64_t published = checkpoint_step_of_dir_name(fs::path(keep_dir).filename().string());
  const std::vector<CheckpointRun> lineage =
      read_checkpoint_lineage(read_json_file(keep_dir + "/" + kCheckpointManifestFile), keep_dir);
  struct Own {
    int64_t step;
    std::string dir;
    double eval_loss;
  };
  std::vector<Own> own;
  for (const CompleteCheckpoint& found : complete_checkpoints(root)) {
    if (found.step > published) continue;
    const RecordedCheckpoint recorded = read_recorded(found.dir.string());
    if (recorded.readable && recorded.run == run_of_step(lineage, found.step))
      own.push_back({found.step, found.dir.string(), recorded.eval_loss});
  }
  std::sort(own.begin(), own.end(), [](const Own& a, const Own& b) { return a.step > b.step; });
  // The best of them, oldest first (the earliest of equal figures).
  std::string best;
  double best_loss = INFINITY;
  for (auto it = own.rbegin(); keep_best_eval && it != own.rend(); ++it)
    if (std::isfinite(it->eval_loss) && it->eval_loss < best_loss)
      best_loss = it->eval_loss, best = it->dir;
  for (size_t i = static_cast<size_t>(std::min<int64_t>(keep_last, own.size())); i < own.size();
       ++i)
    if (own[i].dir != keep_dir && own[i].dir != best) remove_tree(own[i].dir);
}

std::string new_checkpoint_run_id() {
  std::random_device device;
  const uint64_t bits = (static_cast<uint64_t>(device()) << 32) ^ device();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

namespace {

// Per element: the sum over the ranks of their `parts` (modulo 2^64). Collective.
std::vector<uint64_t> summed_over_ranks(Communicator& comm, const std::vector<uint64_t>& parts) {
  const size_t n = parts.size();
  std::vector<int64_t> own(parts.begin(), parts.end());
  std::vector<int64_t> all(n * static_cast<size_t>(comm.world_size()));
  comm.all_gather_blocking(own.data(), all.data(), n);
  std::vector<uint64_t> sums(n, 0);
  for (size_t at = 0; at < all.size(); ++at) sums[at % n] += static_cast<uint64_t>(all[at]);
  return sums;
}

// Once every rank file is complete and fsynced: each rank's file (name, CRC-32C, size) and each
// group kept as a digest (the sum of the ranks' parts) into the manifest. Returns the files'
// bytes. Collective.
uint64_t record_files_and_digests(Communicator& comm, const CheckpointFile& mine,
                                  const std::vector<uint64_t>& own_digests,
                                  const std::vector<bool>& kept_as_digest,
                                  CheckpointManifest& manifest) {
  const int world = comm.world_size();
  std::vector<int64_t> own = {static_cast<int64_t>(mine.crc32c), static_cast<int64_t>(mine.bytes)};
  std::vector<int64_t> all(2 * static_cast<size_t>(world));
  comm.all_gather_blocking(own.data(), all.data(), 2);
  uint64_t bytes = 0;
  for (int r = 0; r < world; ++r) {
    const CheckpointFile f{checkpoint_rank_file_name(r),
                           static_cast<uint32_t>(all[2 * static_cast<size_t>(r)]),
                           static_cast<uint64_t>(all[2 * static_cast<size_t>(r) + 1])};
    bytes += f.bytes;
    manifest.files.push_back(f);
  }
  const std::vector<uint64_t> digests = summed_over_ranks(comm, own_digests);
  for (size_t g = 0; g < digests.size(); ++g)
    if (kept_as_digest[g]) manifest.groups[g].frozen_values_digest = frozen_digest_text(digests[g]);
  return bytes;
}

// The frozen groups the checkpoint keeps as digests against the digests of the values the
// engine holds: `digests` is this rank's part of each (its range of the group at this world
// size). Collective; every rank throws on the first group that differs, naming its tensors (and
// both precisions when they differ).
void verify_frozen_digests(Communicator& comm, const CheckpointManifest& manifest,
                           const std::vector<uint64_t>& digests, const std::string& run_precision,
                           const std::string& dir) {
  if (!keeps_frozen_digests(manifest)) return;
  const std::vector<uint64_t> totals = summed_over_ranks(comm, digests);
  for (size_t g = 0; g < totals.size(); ++g) {
    const std::string& kept = manifest.groups[g].frozen_values_digest;
    const std::string loaded = frozen_digest_text(totals[g]);
    if (kept.empty() || loaded == kept) continue;
    std::string names;
    int count = 0;
    for (const CheckpointTensor& t : manifest.tensors)
      if (static_cast<size_t>(t.group) == g && count++ == 0) names = t.name;
    if (count > 1) names += " and " + std::to_string(count - 1) + " more";
    throw AgreedError("checkpoint '" + dir + "' keeps the frozen values of group " +
                      std::to_string(g) + " (" + names + ") as their digest " + kept +
                      ", and the values this run loaded digest to " + loaded + ": " +
                      (run_precision == manifest.precision
                           ? "it resumes on another base model; resume with the base the run "
                             "started from (its --model, or its preset and --seed)"
                           : "this run computes in " + run_precision + ", the checkpoint in " +
                                 manifest.precision +
                                 ", in which the same base may load as other values, or it "
                                 "resumes on another base model; resume with --precision " +
                                 manifest.precision +
                                 " and the base the run started from (its --model, or its "
                                 "preset and --seed)"));
  }
}

}  // namespace

std::string checkpoints_root(const std::string& out_dir) {
  return strip_trailing_slashes(out_dir) + "/" + kCheckpointsSubdir;
}

CheckpointDebug CheckpointDebug::from_environment() {
  CheckpointDebug d;
  if (const char* r = std::getenv("ZT_DEBUG_FAIL_CHECKPOINT_WRITE"); r && *r)
    d.fail_write_rank = std::atoi(r);
  if (const char* s = std::getenv("ZT_DEBUG_STALL_CHECKPOINT"); s && *s)
    d.stall_seconds = std::atof(s);
  return d;
}

SavedCheckpoint save_checkpoint(ZeroEngine& engine, const TrainingProgress& progress,
                                const TrainingHyperparameters& hyper,
                                const CheckpointSaveOptions& options) {
  engine.apply_delayed_update();  // the held-back update belongs to what is saved
  const Stopwatch clock;
  Communicator& comm = engine.communicator();
  const int rank = comm.rank(), world = comm.world_size();
  const std::string name = checkpoint_step_dir_name(progress.step);
  const std::string tmp = options.root + "/" + kCheckpointTempPrefix + name;
  SavedCheckpoint saved;
  saved.dir = options.root + "/" + name;

  CheckpointManifest manifest;
  manifest.progress = progress;
  manifest.hyper = hyper;
  manifest.world_size = world;
  manifest.zero_stage = engine.zero_config().stage;
  manifest.precision = precision_name(engine.precision());
  manifest.model_config = engine.model().config().to_hf_json();
  manifest.config_fingerprint = model_config_fingerprint(engine.model().config());
  manifest.groups =
      checkpoint_groups(engine.layout(), world, engine.zero_config().shard_alignment());
  manifest.tensors = checkpoint_tensors(engine.layout(), engine.model().trainable());
  manifest.metrics_line = options.metrics_line;
  manifest.lineage = options.lineage;
  manifest.loss_scaling.skipped_steps = engine.skipped_steps();
  if (const LossScaler* scaler = engine.loss_scaler()) {
    manifest.loss_scaling.has_scaler = true;
    manifest.loss_scaling.scaler = scaler->state();
    manifest.loss_scaling.config = scaler->config();
  }

  comm.set_context(progress.step, "checkpoint save");
  // A poisoned state is never saved: it would become `latest` and, under --keep-last, replace
  // the good checkpoints a resume needs.
  const std::string poisoned = engine.non_finite_master_tensor();
  if (!poisoned.empty())
    throw AgreedError("checkpoint " + name + " not saved: the master weights of " + poisoned +
                      " are not finite (NaN or infinity); the earlier checkpoints are kept");
  run_collectively(comm, [&] {
    if (rank == 0) prepare_temp_dir(options.root, tmp);
  });
  try {
    CheckpointFile mine;
    // Per group: this rank's part of a frozen group's digest (kept_as_digest), else unused.
    std::vector<uint64_t> digests(manifest.groups.size(), 0);
    std::vector<bool> kept_as_digest(manifest.groups.size(), false);
    run_collectively(comm, [&] {
      RankFileFaults faults;
      faults.fail_write = options.debug.fail_write_rank == rank;
      faults.stall_seconds = options.debug.stall_seconds;
      // One group staged at a time (NVMe offload): the previous one is released unmodified.
      const int groups = static_cast<int>(manifest.groups.size());
      const auto slice_of = [&](int g) {
        if (g > 0) engine.release_optimizer_shard(g - 1, /*modified=*/false);
        OptimizerSlice s = own_slice(engine, manifest.groups, rank, g);
        if (options.frozen_as_digest && s.m == nullptr) {  // frozen: its digest, not its values
          digests[static_cast<size_t>(g)] =
              frozen_values_digest(s.master, s.range.begin, s.range.count);
          s.stored = false;
          kept_as_digest[static_cast<size_t>(g)] = true;
        }
        return s;
      };
      try {
        mine = write_checkpoint_rank_file(tmp, rank, groups, slice_of, faults);
      } catch (...) {
        for (int g = 0; g < groups; ++g) engine.release_optimizer_shard(g, false);
        throw;
      }
      engine.release_optimizer_shard(groups - 1, /*modified=*/false);
    });
    saved.bytes = record_files_and_digests(comm, mine, digests, kept_as_digest, manifest);
    run_collectively(comm, [&] {
      if (rank == 0) publish(manifest, tmp, saved.dir, options);
    });
  } catch (...) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);  // best effort: the error being reported matters more
    }
    throw;
  }
  saved.seconds = clock.seconds();
  return saved;
}

namespace {

// The checkpoint directory a checkpoints root's `latest` file names (a name in that root).
// Its first line, blanks around it dropped (DeepSpeed strips its tag), must be a name.
std::string named_by_latest(const std::string& root, const std::string& latest) {
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  const size_t begin = name.find_first_not_of(" \t\r"), end = name.find_last_not_of(" \t\r");
  name = begin == std::string::npos ? "" : name.substr(begin, end - begin + 1);
  ZT_CHECK(!in.bad() && !name.empty() && name != "." && name != ".." &&
               name.find('/') == std::string::npos,
           "'" + latest + "' does not name a checkpoint directory");
  return root + "/" + name;
}

}  // namespace

std::string checkpoint_dir_through_latest(const std::string& path) {
  std::error_code ec;
  if (fs::exists(path + "/" + kCheckpointManifestFile, ec)) return path;
  const fs::path given(path);
  if (given.filename() == kLatestCheckpointFile && fs::is_regular_file(given, ec))
    return named_by_latest(given.has_parent_path() ? given.parent_path().string() : ".", path);
  for (const std::string& root : {path, checkpoints_root(path)})
    if (fs::is_regular_file(root + "/" + kLatestCheckpointFile, ec))
      return named_by_latest(root, root + "/" + kLatestCheckpointFile);
  return path;
}

void read_checkpoint_to_resume(const std::string& mode, const std::string& out_dir,
                               const std::string& dir, const std::function<void()>& read) {
  if (mode != "auto") return read();
  const auto hint = [&] {
    try {
      const std::string other = newest_complete_checkpoint(
          checkpoints_root(out_dir), fs::path(strip_trailing_slashes(dir)).filename().string());
      if (other.empty()) return std::string();
      return " (--resume auto read the checkpoint OUT/checkpoints/latest names; where it is " +
             std::string("damaged, --resume ") + other + ", the newest other complete one, " +
             "continues from there)";
    } catch (...) {
      return std::string();
    }
  };
  try {
    read();
  } catch (const CheckpointMismatch&) {
    throw;
  } catch (const AgreedError& e) {
    throw AgreedError(e.what() + hint());
  } catch (const Error& e) {
    throw Error(e.what() + hint());
  }
}

std::string resolve_resume_checkpoint(const std::string& mode, const std::string& out_dir,
                                      std::string* fallback_note) {
  if (mode.empty() || mode == "none") return "";
  std::string dir;
  if (mode != "auto") {
    dir = checkpoint_dir_through_latest(strip_trailing_slashes(mode));
  } else {
    const std::string root = checkpoints_root(out_dir);
    const std::string latest = root + "/" + kLatestCheckpointFile;
    std::error_code ec;
    if (!fs::exists(latest, ec)) {
      const std::string newest = newest_complete_checkpoint(root);
      if (!newest.empty() && fallback_note)
        *fallback_note = "'" + latest + "' is missing; resuming from the newest complete " +
                         "checkpoint, " + newest;
      return newest;
    }
    read_checkpoint_to_resume(mode, out_dir, "", [&] { dir = named_by_latest(root, latest); });
  }
  // "step-N/." or "step-N/" names step-N itself (its parent is the checkpoints root).
  dir = normal_dir_path(dir);
  read_checkpoint_to_resume(mode, out_dir, dir, [&] {
    std::error_code ec;
    ZT_CHECK(fs::exists(dir, ec), "checkpoint directory '" + dir + "' does not exist" +
                                      (ec ? " or cannot be read (" + ec.message() + ")" : ""));
    ZT_CHECK(fs::exists(dir + "/" + kCheckpointManifestFile),
             "'" + dir + "' is not a complete checkpoint (no " + kCheckpointManifestFile + ")");
  });
  return dir;
}

bool resumed_loss_scaler(const CheckpointManifest& manifest, const ZeroEngine& engine) {
  const LossScaler* scaler = engine.loss_scaler();
  return scaler != nullptr && manifest.loss_scaling.has_scaler &&
         manifest.loss_scaling.config == scaler->config();
}

CheckpointManifest load_checkpoint(ZeroEngine& engine, const std::string& dir,
                                   const std::function<void(const CheckpointManifest&)>& check) {
  Communicator& comm = engine.communicator();
  comm.set_context(comm.step(), "checkpoint load");
  CheckpointManifest manifest;
  run_collectively(comm, [&] {
    manifest = CheckpointManifest::read(dir);
    check_checkpoint_model(manifest, engine.model().config(), engine.layout(), dir);
    check_checkpoint_trainable(manifest, engine.layout(), engine.model().trainable(), dir);
    if (check) check(manifest);
  });
  // Per group: this rank's part of the digest of the frozen values the engine holds.
  std::vector<uint64_t> digests(manifest.groups.size(), 0);
  run_collectively(comm, [&] {
    CheckpointRangeReader reader(dir, manifest);
    const std::vector<CheckpointGroup> own_ranges = checkpoint_groups(
        engine.layout(), comm.world_size(), engine.zero_config().shard_alignment());
    for (int g = 0; g < engine.layout().num_groups(); ++g) {
      const OptimizerShard held = engine.optimizer_shard(g);
      if (!manifest.groups[static_cast<size_t>(g)].frozen_values_digest.empty()) {
        const ElementRange mine =
            own_ranges[static_cast<size_t>(g)].ranges[static_cast<size_t>(comm.rank())];
        ZT_CHECK(
            mine.count == 0 || (mine.begin >= held.begin && mine.end() <= held.begin + held.count),
            "checkpoint load: rank " + std::to_string(comm.rank()) +
                " does not hold its slice of frozen group " + std::to_string(g));
        const float* values = held.master + (mine.count == 0 ? 0 : mine.begin - held.begin);
        digests[static_cast<size_t>(g)] = frozen_values_digest(values, mine.begin, mine.count);
        engine.release_optimizer_shard(g, /*modified=*/false);  // the values stay as loaded
        continue;
      }
      const int64_t numel = manifest.groups[static_cast<size_t>(g)].numel;
      // The held range may run past numel into the padding, which stays zero.
      const ElementRange data{std::min(held.begin, numel),
                              std::max<int64_t>(0, std::min(held.begin + held.count, numel) -
                                                       std::min(held.begin, numel))};
      for (OptimizerTensor kind : kOptimizerTensors) {
        float* out = kind == OptimizerTensor::kMaster  ? held.master
                     : kind == OptimizerTensor::kAdamM ? held.m
                                                       : held.v;
        if (out == nullptr) continue;  // a frozen group: its values alone
        reader.read(g, kind, data, out);
        std::fill(out + data.count, out + held.count, 0.0f);
      }
      engine.release_optimizer_shard(g, /*modified=*/true);  // NVMe: written back, unstaged
    }
  });
  verify_frozen_digests(comm, manifest, digests, precision_name(engine.precision()), dir);
  engine.refresh_working_params();
  // The scaler continues where it was only under the same settings (resumed_loss_scaler).
  engine.restore_loss_scaling(
      resumed_loss_scaler(manifest, engine) ? &manifest.loss_scaling.scaler : nullptr,
      manifest.loss_scaling.skipped_steps);
  return manifest;
}

}  // namespace zt

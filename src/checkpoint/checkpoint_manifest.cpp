#include "checkpoint/checkpoint_manifest.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "engine/engine_types.h"
#include "engine/lr_schedule.h"
#include "engine/stage_traits.h"
#include "io/fs_util.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {

namespace {

std::string numbered(const char* format, int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, static_cast<long long>(n));
  return buf;
}

// "crc32c:xxxxxxxx" of a manifest object without its own CRC, dumped compactly (the keys of
// nlohmann::json objects are sorted, so the text is canonical).
std::string manifest_crc(const nlohmann::json& without_crc) {
  const std::string text = without_crc.dump();
  return "crc32c:" + crc32c_hex(crc32c(text.data(), text.size()));
}

// Floats are stored as the double of the exact float value, so they read back bit for bit.
float read_float(const nlohmann::json& j, const char* key) {
  return static_cast<float>(j.at(key).get<double>());
}

std::string int_text(int64_t v) {
  return std::to_string(v);
}

}  // namespace

std::string checkpoint_step_dir_name(int64_t step) {
  return numbered("step-%08lld", step);
}
int64_t checkpoint_step_of_dir_name(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.rfind(kPrefix, 0) != 0 || name.size() == kPrefix.size()) return -1;
  int64_t step = -1;
  const char* end = name.data() + name.size();
  const auto [at, ec] = std::from_chars(name.data() + kPrefix.size(), end, step);
  return ec == std::errc() && at == end && step >= 0 ? step : -1;
}
std::string checkpoint_rank_file_name(int rank) {
  return numbered("rank-%05lld.h5", rank);
}
std::string checkpoint_group_name(int group) {
  return numbered("group_%03lld", group);
}

nlohmann::json TrainingHyperparameters::to_json() const {
  return {{"lr", static_cast<double>(optim.lr)},
          {"min_lr", static_cast<double>(optim.min_lr)},
          {"warmup_steps", optim.warmup_steps},
          {"lr_schedule", lr_schedule_name(optim.schedule)},
          {"warmup_type", warmup_shape_name(optim.warmup_shape)},
          {"warmup_start_lr", static_cast<double>(optim.warmup_start_lr)},
          {"schedule_steps", optim.schedule_steps},
          {"total_steps", total_steps},
          {"beta1", static_cast<double>(optim.beta1)},
          {"beta2", static_cast<double>(optim.beta2)},
          {"eps", static_cast<double>(optim.eps)},
          {"weight_decay", static_cast<double>(optim.weight_decay)},
          {"clip", static_cast<double>(optim.clip)},
          {"micro_batch", micro_batch},
          {"grad_accum", grad_accum},
          {"seq_len", seq_len},
          {"data_seed", data_seed},
          {"data_identity", data_identity},
          {"world_invariant", world_invariant},
          {"deterministic", deterministic},
          {"backend", backend},
          {"attention", attention},
          {"activations", activations},
          {"document_masking", document_masking},
          {"packing", packing}};
}

TrainingHyperparameters TrainingHyperparameters::from_json(const nlohmann::json& j) {
  TrainingHyperparameters h;
  h.optim.lr = read_float(j, "lr");
  h.optim.min_lr = read_float(j, "min_lr");
  h.optim.warmup_steps = j.at("warmup_steps").get<int64_t>();
  // Absent from checkpoints written before the DeepSpeed schedules: the cosine defaults.
  if (j.contains("lr_schedule"))
    h.optim.schedule =
        parse_lr_schedule(j.at("lr_schedule").get<std::string>(), "hyperparameters.lr_schedule");
  if (j.contains("warmup_type"))
    h.optim.warmup_shape =
        parse_warmup_shape(j.at("warmup_type").get<std::string>(), "hyperparameters.warmup_type");
  if (j.contains("warmup_start_lr")) h.optim.warmup_start_lr = read_float(j, "warmup_start_lr");
  if (j.contains("schedule_steps")) h.optim.schedule_steps = j.at("schedule_steps").get<int64_t>();
  h.total_steps = j.at("total_steps").get<int64_t>();
  h.optim.beta1 = read_float(j, "beta1");
  h.optim.beta2 = read_float(j, "beta2");
  h.optim.eps = read_float(j, "eps");
  h.optim.weight_decay = read_float(j, "weight_decay");
  h.optim.clip = read_float(j, "clip");
  h.micro_batch = j.at("micro_batch").get<int64_t>();
  h.grad_accum = j.at("grad_accum").get<int64_t>();
  h.seq_len = j.at("seq_len").get<int64_t>();
  h.data_seed = j.at("data_seed").get<uint64_t>();
  h.data_identity = j.value("data_identity", "");
  h.world_invariant_recorded = j.contains("world_invariant");
  h.world_invariant = j.value("world_invariant", false);
  h.deterministic = j.value("deterministic", true);
  h.backend = j.value("backend", "");
  h.attention = j.value("attention", "");
  h.activations = j.value("activations", "");
  h.document_masking = j.value("document_masking", "off");
  h.packing = j.value("packing", "wrapped");
  ZT_CHECK(h.packing == "wrapped" || h.packing == "documents" || h.packing == "bfd",
           "hyperparameters.packing must be wrapped, documents or bfd, got '" + h.packing + "'");
  return h;
}

nlohmann::json CheckpointManifest::to_json() const {
  nlohmann::json groups_json = nlohmann::json::array();
  for (const CheckpointGroup& g : groups) {
    nlohmann::json ranges = nlohmann::json::array();
    for (const ElementRange& r : g.ranges) ranges.push_back({r.begin, r.count});
    groups_json.push_back({{"numel", g.numel}, {"shard", g.shard}, {"file_ranges", ranges}});
    if (!g.frozen_values_digest.empty())
      groups_json.back()["frozen_values_digest"] = g.frozen_values_digest;
  }
  nlohmann::json tensors_json = nlohmann::json::array();
  for (const CheckpointTensor& t : tensors) {
    tensors_json.push_back(
        {{"name", t.name}, {"group", t.group}, {"offset", t.offset}, {"shape", t.shape}});
    if (t.frozen) tensors_json.back()["frozen"] = true;
  }
  nlohmann::json files_json = nlohmann::json::array();
  for (const CheckpointFile& f : files)
    files_json.push_back({{"name", f.name}, {"crc32c", crc32c_hex(f.crc32c)}, {"bytes", f.bytes}});
  nlohmann::json j = {
      {"format", "zerotrain-checkpoint"},
      {"format_version", keeps_frozen_digests(*this) ? 3 : std::min(format_version, 2)},
      {"step", progress.step},
      {"tokens_seen", progress.tokens_seen},
      {"data_cursor", {{"epoch", progress.cursor.epoch}, {"position", progress.cursor.position}}},
      {"rng_state", {{"data_seed", hyper.data_seed}, {"note", "no other random state"}}},
      {"world_size", world_size},
      {"zero_stage", zero_stage},
      {"precision", precision},
      {"model_config", model_config},
      {"config_fingerprint", config_fingerprint},
      {"hyperparameters", hyper.to_json()},
      {"groups", groups_json},
      {"tensors", tensors_json},
      {"files", files_json},
      {"metrics_line", metrics_line}};
  if (loss_scaling.has_scaler || loss_scaling.skipped_steps > 0) {
    nlohmann::json scaling = {{"skipped_steps", loss_scaling.skipped_steps}};
    if (loss_scaling.has_scaler) {
      const LossScaler::State& st = loss_scaling.scaler;
      const LossScaleConfig& c = loss_scaling.config;
      scaling["scaler"] = {{"cur_scale", st.cur_scale},
                           {"cur_iter", st.cur_iter},
                           {"last_overflow_iter", st.last_overflow_iter},
                           {"cur_hysteresis", st.cur_hysteresis}};
      scaling["config"] = {{"loss_scale", c.loss_scale},
                           {"initial_scale_power", c.initial_scale_power},
                           {"loss_scale_window", c.loss_scale_window},
                           {"hysteresis", c.hysteresis},
                           {"consecutive_hysteresis", c.consecutive_hysteresis},
                           {"min_loss_scale", c.min_loss_scale}};
    }
    j["loss_scaling"] = scaling;
  }
  if (!lineage.empty()) {
    nlohmann::json runs = nlohmann::json::array();
    for (const CheckpointRun& run : lineage)
      runs.push_back({{"run", run.id}, {"from_step", run.from_step}});
    j["lineage"] = runs;
  }
  j["manifest_crc32c"] = manifest_crc(j);
  return j;
}

std::vector<CheckpointRun> read_checkpoint_lineage(const nlohmann::json& manifest,
                                                   const std::string& source) {
  const auto it = manifest.find("lineage");
  if (it == manifest.end()) return {};
  std::vector<CheckpointRun> lineage;
  const bool is_list = it->is_array() && !it->empty();
  for (size_t i = 0; is_list && i < it->size(); ++i) {
    const nlohmann::json& run = (*it)[i];
    const bool valid = run.is_object() && run.value("run", nlohmann::json()).is_string() &&
                       run.value("from_step", nlohmann::json()).is_number_integer();
    ZT_CHECK(valid, source + ": lineage[" + std::to_string(i) +
                        "] is not an object with a string \"run\" and an integer \"from_step\"");
    lineage.push_back({run["run"].get<std::string>(), run["from_step"].get<int64_t>()});
    ZT_CHECK(lineage.back().from_step >= (i == 0 ? 0 : lineage[i - 1].from_step + 1),
             source + ": lineage[" + std::to_string(i) + "].from_step " +
                 std::to_string(lineage.back().from_step) + " is not after the run before it");
  }
  ZT_CHECK(is_list, source + ": lineage is not a list of runs");
  return lineage;
}

std::string run_of_step(const std::vector<CheckpointRun>& lineage, int64_t step) {
  std::string id;
  for (const CheckpointRun& run : lineage)
    if (run.from_step < step) id = run.id;
  return id;
}

namespace {

// The manifest's "loss_scaling" object: the steps skipped on overflow and the fp16 scaler.
LossScalingProgress read_loss_scaling(const nlohmann::json& ls, const std::string& source) {
  LossScalingProgress s;
  s.skipped_steps = ls.at("skipped_steps").get<int64_t>();
  ZT_CHECK(s.skipped_steps >= 0, source + ": loss_scaling.skipped_steps must be >= 0");
  if (ls.contains("scaler")) {
    const nlohmann::json& sc = ls.at("scaler");
    LossScaler::State& st = s.scaler;
    s.has_scaler = true;
    st.cur_scale = sc.at("cur_scale").get<double>();
    st.cur_iter = sc.at("cur_iter").get<int64_t>();
    st.last_overflow_iter = sc.at("last_overflow_iter").get<int64_t>();
    st.cur_hysteresis = sc.at("cur_hysteresis").get<int>();
    const nlohmann::json& cc = ls.at("config");
    LossScaleConfig& c = s.config;
    c.loss_scale = cc.at("loss_scale").get<double>();
    c.initial_scale_power = cc.at("initial_scale_power").get<int>();
    c.loss_scale_window = cc.at("loss_scale_window").get<int64_t>();
    c.hysteresis = cc.at("hysteresis").get<int>();
    c.consecutive_hysteresis = cc.at("consecutive_hysteresis").get<bool>();
    c.min_loss_scale = cc.at("min_loss_scale").get<double>();
    ZT_CHECK(std::isfinite(st.cur_scale) && st.cur_scale > 0,
             source + ": loss_scaling.scaler.cur_scale must be a positive number");
  }
  return s;
}

// The manifest's groups, tensors and rank files.
void read_layout(const nlohmann::json& j, CheckpointManifest& m) {
  for (const auto& g : j.at("groups")) {
    CheckpointGroup group;
    group.numel = g.at("numel").get<int64_t>();
    group.shard = g.at("shard").get<int64_t>();
    for (const auto& r : g.at("file_ranges"))
      group.ranges.push_back({r.at(0).get<int64_t>(), r.at(1).get<int64_t>()});
    group.frozen_values_digest = g.value("frozen_values_digest", "");
    m.groups.push_back(std::move(group));
  }
  for (const auto& t : j.at("tensors"))
    m.tensors.push_back({t.at("name").get<std::string>(), t.at("group").get<int>(),
                         t.at("offset").get<int64_t>(), t.at("shape").get<std::vector<int64_t>>(),
                         t.value("frozen", false)});
  for (const auto& f : j.at("files")) {
    const std::string hex = f.at("crc32c").get<std::string>();
    m.files.push_back({f.at("name").get<std::string>(),
                       static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16)),
                       f.at("bytes").get<uint64_t>()});
  }
}

// A group kept as a digest: the digest is well formed and every tensor of the group is frozen
// (a group that trains has optimizer state, which only its values can carry).
void check_frozen_digests(const CheckpointManifest& m, const std::string& source) {
  ZT_CHECK(m.format_version >= 3 || !keeps_frozen_digests(m),
           source + ": frozen_values_digest in a format-" + std::to_string(m.format_version) +
               " manifest (digests came with format 3)");
  const std::string prefix = kFrozenDigestPrefix;
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const std::string& digest = m.groups[g].frozen_values_digest;
    if (digest.empty()) continue;
    const std::string hex = digest.substr(std::min(digest.size(), prefix.size()));
    ZT_CHECK(digest.rfind(prefix, 0) == 0 && hex.size() == 16 &&
                 hex.find_first_not_of("0123456789abcdef") == std::string::npos,
             source + ": group " + std::to_string(g) + "'s frozen_values_digest '" + digest +
                 "' is not " + prefix + " and 16 lowercase hex digits");
    for (const CheckpointTensor& t : m.tensors)
      ZT_CHECK(static_cast<size_t>(t.group) != g || t.frozen,
               source + ": group " + std::to_string(g) + " is kept as a digest of frozen values, " +
                   "but its tensor " + t.name + " trains");
  }
}

// Internal consistency: counts are non-negative, one file per rank, each group's ranges tile
// [0, numel), each tensor lies inside its group.
void check_consistency(const CheckpointManifest& m, const std::string& source) {
  const TrainingProgress& p = m.progress;
  ZT_CHECK(p.step >= 0 && p.tokens_seen >= 0 && p.cursor.epoch >= 0 && p.cursor.position >= 0,
           source + ": negative step, tokens_seen or data_cursor (step " + int_text(p.step) +
               ", tokens_seen " + int_text(p.tokens_seen) + ", epoch " + int_text(p.cursor.epoch) +
               ", position " + int_text(p.cursor.position) + ")");
  ZT_CHECK(StageTraits::exists(m.zero_stage), source + ": zero_stage " + int_text(m.zero_stage) +
                                                  " is not " + StageTraits::kRangeText);
  ZT_CHECK(m.precision == "bf16" || m.precision == "fp16" || m.precision == "fp32",
           source + ": precision '" + m.precision + "' is not bf16, fp16 or fp32");
  ZT_CHECK(!m.tensors.empty(), source + ": the manifest lists no tensors");
  // Rank files are read from the checkpoint directory itself: a plain file name, never a path.
  for (const CheckpointFile& f : m.files)
    ZT_CHECK(
        !f.name.empty() && f.name != "." && f.name != ".." && f.name.find('/') == std::string::npos,
        source + ": file name '" + f.name +
            "' is not a plain file name inside the checkpoint directory");
  for (size_t g = 0; g < m.groups.size(); ++g)
    ZT_CHECK(m.groups[g].numel >= 0 && m.groups[g].shard >= 0,
             source + ": group " + std::to_string(g) + " has a negative size");
  for (const CheckpointTensor& t : m.tensors) {
    bool inside = t.group >= 0 && static_cast<size_t>(t.group) < m.groups.size() && t.offset >= 0;
    int64_t numel = 1;
    for (int64_t extent : t.shape)
      inside = inside && extent >= 0 && !__builtin_mul_overflow(numel, extent, &numel);
    ZT_CHECK(inside && numel <= m.groups[static_cast<size_t>(t.group)].numel - t.offset,
             source + ": tensor " + t.name + " does not lie inside its group " + int_text(t.group));
  }
  ZT_CHECK(m.world_size >= 1 && m.files.size() == static_cast<size_t>(m.world_size),
           source + ": " + std::to_string(m.files.size()) + " files listed for world size " +
               std::to_string(m.world_size));
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const CheckpointGroup& group = m.groups[g];
    int64_t next = 0;
    bool tiles = group.ranges.size() == m.files.size();
    for (const ElementRange& r : group.ranges) {
      tiles = tiles && r.count >= 0 && (r.count == 0 || r.begin == next);
      next = r.count > 0 ? r.end() : next;
    }
    ZT_CHECK(tiles && next == group.numel, source + ": the file ranges of group " +
                                               std::to_string(g) + " do not cover its " +
                                               std::to_string(group.numel) + " elements once");
  }
  check_frozen_digests(m, source);
}

}  // namespace

CheckpointManifest CheckpointManifest::from_json(const nlohmann::json& j,
                                                 const std::string& source) {
  CheckpointManifest m;
  try {
    ZT_CHECK(j.value("format", "") == "zerotrain-checkpoint",
             source + ": not a zerotrain checkpoint manifest");
    m.format_version = j.at("format_version").get<int>();
    ZT_CHECK(m.format_version >= 1 && m.format_version <= kCheckpointFormatVersion,
             source + ": checkpoint format version " + std::to_string(m.format_version) +
                 ", this build reads versions 1 to " + std::to_string(kCheckpointFormatVersion));
    if (m.format_version >= 2) {
      ZT_CHECK(j.contains("manifest_crc32c"), source + ": the manifest has no manifest_crc32c");
      nlohmann::json rest = j;
      rest.erase("manifest_crc32c");
      ZT_CHECK(j.at("manifest_crc32c") == manifest_crc(rest),
               source +
                   ": the manifest's CRC-32C does not match its content (it was edited or "
                   "damaged); refusing to read it");
    }
    m.metrics_line = j.value("metrics_line", nlohmann::json());
    m.lineage = read_checkpoint_lineage(j, source);
    if (j.contains("loss_scaling"))
      m.loss_scaling = read_loss_scaling(j.at("loss_scaling"), source);
    m.progress.step = j.at("step").get<int64_t>();
    m.progress.tokens_seen = j.at("tokens_seen").get<int64_t>();
    m.progress.cursor.epoch = j.at("data_cursor").at("epoch").get<int64_t>();
    m.progress.cursor.position = j.at("data_cursor").at("position").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.zero_stage = j.at("zero_stage").get<int>();
    m.precision = j.at("precision").get<std::string>();
    m.model_config = j.at("model_config");
    m.config_fingerprint = j.at("config_fingerprint").get<std::string>();
    try {
      m.hyper = TrainingHyperparameters::from_json(j.at("hyperparameters"));
    } catch (const Error& e) {  // a value out of its set (an unknown schedule name)
      fail(source + ": malformed checkpoint manifest: " + e.what());
    }
    read_layout(j, m);
  } catch (const nlohmann::json::exception& e) {
    fail(source + ": malformed checkpoint manifest: " + e.what());
  }
  check_consistency(m, source);
  return m;
}

CheckpointManifest CheckpointManifest::read(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/" + kCheckpointManifestFile;
  const std::string dir_name =
      std::filesystem::path(normal_dir_path(checkpoint_dir)).filename().string();
  ZT_CHECK(dir_name.rfind(kCheckpointTempPrefix, 0) != 0,
           "'" + checkpoint_dir + "' is a checkpoint whose save did not finish (a " +
               kCheckpointTempPrefix +
               " directory becomes a checkpoint only by its final rename); give a complete one, "
               "RUN/checkpoints/step-N, or --resume auto");
  CheckpointManifest m = from_json(read_json_file(path), path);
  // A checkpoint directory is named after its step; a manifest that says otherwise was edited.
  const int64_t named_step = checkpoint_step_of_dir_name(dir_name);
  if (named_step >= 0)
    ZT_CHECK(named_step == m.progress.step, path + ": the manifest says step " +
                                                int_text(m.progress.step) +
                                                " but its directory is " + dir_name);
  return m;
}

std::vector<CheckpointGroup> checkpoint_groups(const ParamLayout& layout, int world,
                                               int64_t shard_align) {
  std::vector<CheckpointGroup> groups;
  for (const GroupInfo& info : layout.groups()) {
    CheckpointGroup g;
    g.numel = info.numel;
    g.shard = GroupPartition::of(info.numel, world, shard_align).shard;  // the engine's
    for (int r = 0; r < world; ++r) {
      const int64_t begin = std::min<int64_t>(r * g.shard, g.numel);
      g.ranges.push_back({begin, std::min(g.shard, g.numel - begin)});
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<CheckpointTensor> checkpoint_tensors(const ParamLayout& layout,
                                                 const TrainableSet& trainable) {
  std::vector<CheckpointTensor> tensors;
  for (const TensorInfo& t : layout.tensors())
    tensors.push_back({t.name, t.group, t.offset, t.shape, !trainable.trains(layout.index_of(t))});
  return tensors;
}

bool keeps_frozen_digests(const CheckpointManifest& manifest) {
  for (const CheckpointGroup& g : manifest.groups)
    if (!g.frozen_values_digest.empty()) return true;
  return false;
}

std::string model_config_fingerprint(const ModelConfig& config) {
  const std::string canonical = config.to_hf_json().dump();
  return "crc32c:" + crc32c_hex(crc32c(canonical.data(), canonical.size()));
}

}  // namespace zt

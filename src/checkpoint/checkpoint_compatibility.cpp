#include "checkpoint/checkpoint_compatibility.h"

#include <algorithm>
#include <set>

#include "engine/lr_schedule.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

namespace {

// One "key: checkpoint X, run Y" entry when the values differ.
template <typename T, typename Text>
void compare(std::vector<std::string>& out, const char* key, const T& saved, const T& run,
             Text text) {
  if (saved != run)
    out.push_back(std::string(key) + ": checkpoint " + text(saved) + ", run " + text(run));
}

std::string int_text(int64_t v) {
  return std::to_string(v);
}

std::string float_text(float v) {
  return shortest_decimal(v);
}

std::string bool_text(bool v) {
  return v ? "true" : "false";
}

const std::string& as_is(const std::string& s) {
  return s;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : "; ") + p;
  return s;
}

}  // namespace

void check_checkpoint_trainable(const CheckpointManifest& manifest, const ParamLayout& layout,
                                const TrainableSet& trainable, const std::string& checkpoint_dir) {
  std::vector<std::string> frozen_then, frozen_now;
  for (size_t i = 0; i < manifest.tensors.size() && i < layout.tensors().size(); ++i) {
    const bool now = !trainable.trains(static_cast<int>(i));
    if (manifest.tensors[i].frozen && !now) frozen_then.push_back(manifest.tensors[i].name);
    if (!manifest.tensors[i].frozen && now) frozen_now.push_back(manifest.tensors[i].name);
  }
  if (frozen_then.empty() && frozen_now.empty()) return;
  auto listed = [](const std::vector<std::string>& names) {
    std::vector<std::string> shown(names.begin(),
                                   names.begin() + std::min<size_t>(names.size(), 4));
    std::string s = joined(shown);
    if (names.size() > shown.size())
      s += " and " + std::to_string(names.size() - shown.size()) + " more";
    return s;
  };
  std::string what;
  if (!frozen_then.empty())
    what += "frozen in the checkpoint, trainable now: " + listed(frozen_then);
  if (!frozen_now.empty())
    what += std::string(what.empty() ? "" : "; ") +
            "trainable in the checkpoint, frozen now: " + listed(frozen_now);
  fail("checkpoint '" + checkpoint_dir + "' was trained with other frozen tensors (" + what +
       "); resume with the same --trainable/--freeze (its optimizer state exists only for the "
       "tensors that trained)");
}

void check_checkpoint_model(const CheckpointManifest& manifest, const ModelConfig& config,
                            const ParamLayout& layout, const std::string& checkpoint_dir) {
  const nlohmann::json run = config.to_hf_json();
  // LoRA first: a resume that forgot (or changed) the adapter options is told which they were.
  const nlohmann::json saved_lora = manifest.model_config.value(kLoraConfigKey, nlohmann::json());
  const nlohmann::json run_lora = run.value(kLoraConfigKey, nlohmann::json());
  ZT_CHECK(saved_lora == run_lora,
           "checkpoint '" + checkpoint_dir + "' " +
               (saved_lora.is_null() ? "has no LoRA adapters"
                                     : "trained the LoRA adapters " + saved_lora.dump()) +
               ", this run " + (run_lora.is_null() ? "has none" : "asks for " + run_lora.dump()) +
               " (the model config's " + kLoraConfigKey +
               "): resume with the adapter options it was trained with (--lora-rank, --lora-alpha, "
               "--lora-dropout, --lora-targets, --use-rslora, --use-dora, or --lora-config)");
  std::set<std::string> keys;
  for (const auto& [key, value] : run.items()) keys.insert(key);
  for (const auto& [key, value] : manifest.model_config.items()) keys.insert(key);
  std::vector<std::string> diffs;
  for (const std::string& key : keys) {
    const nlohmann::json saved = manifest.model_config.value(key, nlohmann::json());
    const nlohmann::json now = run.value(key, nlohmann::json());
    if (saved != now) diffs.push_back(key + ": checkpoint " + saved.dump() + ", run " + now.dump());
  }
  ZT_CHECK(diffs.empty(),
           "checkpoint '" + checkpoint_dir + "' holds a different model (" + joined(diffs) + ")");
  ZT_CHECK(manifest.config_fingerprint == model_config_fingerprint(config),
           "checkpoint '" + checkpoint_dir + "': model config fingerprint " +
               manifest.config_fingerprint + " does not match its config (edited manifest?)");
  const std::vector<CheckpointTensor> expected = checkpoint_tensors(layout);
  ZT_CHECK(manifest.tensors.size() == expected.size() &&
               manifest.groups.size() == layout.groups().size(),
           "checkpoint '" + checkpoint_dir + "': " + std::to_string(manifest.tensors.size()) +
               " tensors in " + std::to_string(manifest.groups.size()) + " groups, the model has " +
               std::to_string(expected.size()) + " in " + std::to_string(layout.groups().size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const CheckpointTensor &a = manifest.tensors[i], &b = expected[i];
    ZT_CHECK(a.name == b.name && a.group == b.group && a.offset == b.offset && a.shape == b.shape,
             "checkpoint '" + checkpoint_dir + "': tensor " + std::to_string(i) + " is '" + a.name +
                 "' at group " + std::to_string(a.group) + " offset " + std::to_string(a.offset) +
                 ", this build places '" + b.name + "' at group " + std::to_string(b.group) +
                 " offset " + std::to_string(b.offset));
  }
  for (size_t g = 0; g < layout.groups().size(); ++g) {
    ZT_CHECK(manifest.groups[g].numel == layout.groups()[g].numel,
             "checkpoint '" + checkpoint_dir + "': group " + std::to_string(g) + " has " +
                 std::to_string(manifest.groups[g].numel) + " elements, the model " +
                 std::to_string(layout.groups()[g].numel));
  }
}

std::vector<std::string> check_resume_hyperparameters(
    const CheckpointManifest& manifest, const TrainingHyperparameters& run, int run_world_size,
    const std::string& run_precision, const std::string& checkpoint_dir, bool allow_data_change) {
  const TrainingHyperparameters& saved = manifest.hyper;
  std::vector<std::string> errors, warnings;
  compare(errors, "seq_len", saved.seq_len, run.seq_len, int_text);
  // The data cursor counts the windows of one packing (io/data_loader.h); on other data it
  // counts another dataset's windows anyway.
  compare(allow_data_change ? warnings : errors,
          "packing (--packing auto continues the checkpoint's)", saved.packing, run.packing, as_is);
  compare(errors, "seed (data order)", saved.data_seed, run.data_seed,
          [](uint64_t v) { return std::to_string(v); });
  compare(errors, "beta1", saved.optim.beta1, run.optim.beta1, float_text);
  compare(errors, "beta2", saved.optim.beta2, run.optim.beta2, float_text);
  compare(errors, "eps", saved.optim.eps, run.optim.eps, float_text);
  compare(errors, "weight_decay", saved.optim.weight_decay, run.optim.weight_decay, float_text);
  compare(errors, "clip", saved.optim.clip, run.optim.clip, float_text);
  if (!allow_data_change && !saved.data_identity.empty())
    compare(errors, "dataset (use --allow-data-change to resume on other data)",
            saved.data_identity, run.data_identity, as_is);
  if (manifest.world_size == run_world_size) {
    compare(errors, "micro_batch", saved.micro_batch, run.micro_batch, int_text);
    compare(errors, "grad_accum", saved.grad_accum, run.grad_accum, int_text);
  } else {
    compare(warnings, "global batch (sequences)",
            saved.micro_batch * saved.grad_accum * manifest.world_size,
            run.micro_batch * run.grad_accum * run_world_size, int_text);
  }
  ZT_CHECK(errors.empty(), "cannot resume from '" + checkpoint_dir +
                               "': settings differ from the checkpoint's (" + joined(errors) + ")");
  compare(warnings, "lr", saved.optim.lr, run.optim.lr, float_text);
  compare(warnings, "min_lr", saved.optim.min_lr, run.optim.min_lr, float_text);
  compare(warnings, "warmup_steps", saved.optim.warmup_steps, run.optim.warmup_steps, int_text);
  compare(warnings, "lr_schedule", saved.optim.schedule, run.optim.schedule, lr_schedule_name);
  compare(warnings, "warmup_type", saved.optim.warmup_shape, run.optim.warmup_shape,
          warmup_shape_name);
  compare(warnings, "warmup_start_lr", saved.optim.warmup_start_lr, run.optim.warmup_start_lr,
          float_text);
  compare(warnings, "schedule_steps", saved.optim.schedule_steps, run.optim.schedule_steps,
          int_text);
  compare(warnings, "steps (schedule length)", saved.total_steps, run.total_steps, int_text);
  compare(warnings, "precision", manifest.precision, run_precision, as_is);
  if (saved.world_invariant_recorded)
    compare(warnings, "world_invariant", saved.world_invariant, run.world_invariant, bool_text);
  // --deterministic toggled on the fused attention, the one kernel it changes: the state loads;
  // the continuation's bits differ from the run's.
  if (saved.attention == "fused" && run.attention == "fused")
    compare(warnings, "deterministic", saved.deterministic, run.deterministic, bool_text);
  const std::pair<const char*, std::string TrainingHyperparameters::*> arithmetic[] = {
      {"backend", &TrainingHyperparameters::backend},
      {"attention", &TrainingHyperparameters::attention},
      {"activations", &TrainingHyperparameters::activations},
      {"document_masking", &TrainingHyperparameters::document_masking}};
  std::string unrecorded;  // what this run computes with, where the checkpoint does not say
  for (const auto& [name, field] : arithmetic) {
    if (!(saved.*field).empty())
      compare(warnings, name, saved.*field, run.*field, as_is);
    else if (!(run.*field).empty())
      unrecorded += std::string(unrecorded.empty() ? "" : ", ") + name + " " + run.*field;
  }
  // The default mode sums a step's gradients in an order that follows the ranks.
  // (A checkpoint of the default mode resumed world-invariant: the world_invariant line says it.)
  if (manifest.world_size != run_world_size && !run.world_invariant)
    warnings.push_back("world size: checkpoint " + std::to_string(manifest.world_size) + ", run " +
                       std::to_string(run_world_size) +
                       ", without --world-invariant (a step's gradient sums follow the ranks)");
  for (std::string& w : warnings) w += " (the continuation will differ from an uninterrupted run)";
  if (!unrecorded.empty())
    warnings.push_back(
        "the checkpoint does not record what computed it (written by an earlier "
        "release); this run uses " +
        unrecorded + ": if that differs, so will the continuation");
  return warnings;
}

}  // namespace zt

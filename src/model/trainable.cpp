#include "model/trainable.h"

#include <re2/re2.h>

#include <algorithm>
#include <memory>

#include "model/hf_checkpoint_tensors.h"
#include "util/error.h"

namespace zt {

namespace {

// Patterns longer than any tensor-name pattern a person writes are refused before compiling.
constexpr size_t kMaxPatternBytes = 4096;

// RE2 matches in time linear in the name whatever the pattern ((.*)*q included), bounds its
// memory, and refuses nesting beyond its limit instead of recursing into it.
std::vector<std::unique_ptr<RE2>> compile(const std::vector<std::string>& patterns,
                                          const char* option) {
  std::vector<std::unique_ptr<RE2>> out;
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(int64_t{8} << 20);
  for (const std::string& p : patterns) {
    ZT_CHECK(!p.empty(), std::string(option) +
                             ": an empty pattern matches every tensor; give a "
                             "regular expression");
    ZT_CHECK(p.size() <= kMaxPatternBytes,
             std::string(option) + ": a pattern of " + std::to_string(p.size()) +
                 " bytes; tensor-name patterns are limited to " + std::to_string(kMaxPatternBytes));
    auto re = std::make_unique<RE2>(p, options);
    ZT_CHECK(re->ok(), std::string(option) + " '" + p +
                           "' is not a valid regular expression: " + re->error());
    out.push_back(std::move(re));
  }
  return out;
}

}  // namespace

TrainableSet TrainableSet::from_patterns(const ParamLayout& layout,
                                         const std::vector<std::string>& trainable,
                                         const std::vector<std::string>& freeze) {
  TrainableSet s;
  const bool lora = layout.adapter_group(0) >= 0;
  if (trainable.empty() && freeze.empty() && !lora) return s;
  const auto keep = compile(trainable, "--trainable");
  const auto drop = compile(freeze, "--freeze");
  std::vector<bool> keep_used(keep.size(), false), drop_used(drop.size(), false);
  const std::vector<TensorInfo>& tensors = layout.tensors();
  // A pattern also matches the tensor a Hugging Face checkpoint stores a tensor in: Phi-3's
  // 'qkv_proj' (and 'v_proj', which its name holds, as in PyTorch) select q, k and v.
  const std::vector<HfCheckpointPlace> places = hf_checkpoint_places(layout);
  auto matches = [&](size_t t, const RE2& re) {
    return RE2::PartialMatch(tensors[t].name, re) ||
           (places[t].name != tensors[t].name && RE2::PartialMatch(places[t].name, re));
  };
  s.frozen_.assign(tensors.size(), false);
  bool any_trains = false;
  for (size_t t = 0; t < tensors.size(); ++t) {
    // LoRA: the adapters train, the base only where --trainable names it (modules_to_save).
    bool trains = tensors[t].is_lora() || (keep.empty() && !lora);
    for (size_t i = 0; i < keep.size(); ++i)
      if (matches(t, *keep[i])) {
        ZT_CHECK(!lora || tensors[t].layer < 0 || tensors[t].is_lora(),
                 "--trainable '" + trainable[i] + "' matches " + tensors[t].name +
                     ": with LoRA a decoder layer's own tensors stay frozen (train the embedding, "
                     "the final norm or lm_head in full, or adapt the layer's projections)");
        trains = true, keep_used[i] = true;
      }
    for (size_t i = 0; i < drop.size(); ++i)
      if (matches(t, *drop[i])) trains = false, drop_used[i] = true;
    s.frozen_[t] = !trains;
    any_trains = any_trains || trains;
  }
  // The example a refusal gives: the last tensor of the base (an adapter's is no name to give).
  std::string example;
  bool has_head = false;
  for (const TensorInfo& t : tensors) {
    if (!t.is_lora()) example = t.name;
    has_head = has_head || t.role == TensorRole::kLmHead;
  }
  auto check_used = [&](const std::vector<std::string>& patterns, const std::vector<bool>& used,
                        const char* option) {
    for (size_t i = 0; i < patterns.size(); ++i) {
      const bool tied_head = !has_head && patterns[i].find("lm_head") != std::string::npos;
      ZT_CHECK(used[i], std::string(option) + " '" + patterns[i] +
                            "' matches no tensor of the model (" +
                            (tied_head ? "this model ties lm_head to model.embed_tokens.weight, "
                                         "which 'embed_tokens' names, the head with it; "
                                       : "") +
                            "names as in Hugging Face, e.g. '" + example +
                            "'; `zerotrain info MODEL_DIR` lists them)");
    }
  };
  check_used(trainable, keep_used, "--trainable");
  check_used(freeze, drop_used, "--freeze");
  ZT_CHECK(any_trains, "--trainable/--freeze leave no tensor to train");
  bool none_frozen = true;
  for (bool f : s.frozen_) none_frozen = none_frozen && !f;
  if (none_frozen) s.frozen_.clear();
  return s;
}

TrainableSet TrainableSet::all_frozen(const ParamLayout& layout) {
  TrainableSet s;
  s.frozen_.assign(layout.tensors().size(), true);
  return s;
}

TrainableSet TrainableSet::from_frozen_names(const ParamLayout& layout,
                                             const std::vector<std::string>& frozen) {
  TrainableSet s;
  if (frozen.empty()) return s;
  s.frozen_.assign(layout.tensors().size(), false);
  for (const std::string& name : frozen) {
    const int t = layout.find(name);
    ZT_CHECK(t >= 0, "frozen tensor '" + name + "' is not a tensor of the model");
    s.frozen_[static_cast<size_t>(t)] = true;
  }
  return s;
}

bool TrainableSet::trains(int tensor) const {
  return frozen_.empty() || !frozen_[static_cast<size_t>(tensor)];
}

GroupTraining TrainableSet::group(const ParamLayout& layout, int g) const {
  int trainable = 0, total = 0;
  for (int t : layout.groups()[static_cast<size_t>(g)].tensors) {
    ++total;
    if (trains(t)) ++trainable;
  }
  // An empty group (a layer without adapters: layers_to_transform) trains nothing.
  return total == 0           ? GroupTraining::kNone
         : trainable == total ? GroupTraining::kAll
         : trainable == 0     ? GroupTraining::kNone
                              : GroupTraining::kSome;
}

int TrainableSet::lowest_backward_group(const ParamLayout& layout) const {
  int lowest = layout.num_compute_units();  // no unit: all_frozen() runs no backward
  for (int g = 0; g < layout.num_groups(); ++g)
    if (group_trains(layout, g)) lowest = std::min(lowest, layout.compute_unit_of(g));
  return lowest;
}

int64_t TrainableSet::trainable_numel(const ParamLayout& layout) const {
  int64_t n = 0;
  for (size_t t = 0; t < layout.tensors().size(); ++t)
    if (trains(static_cast<int>(t))) n += layout.tensors()[t].numel;
  return n;
}

int64_t TrainableSet::state_numel(const ParamLayout& layout) const {
  int64_t n = 0;
  for (int g = 0; g < layout.num_groups(); ++g)
    if (group_trains(layout, g)) n += layout.groups()[static_cast<size_t>(g)].numel;
  return n;
}

std::vector<std::string> TrainableSet::frozen_names(const ParamLayout& layout) const {
  std::vector<std::string> out;
  for (size_t t = 0; t < frozen_.size(); ++t)
    if (frozen_[t]) out.push_back(layout.tensors()[t].name);
  return out;
}

double training_flops_per_token(const ModelConfig& config, int64_t seq_len,
                                const TrainableSet& trainable) {
  const ParamLayout layout(config);
  const int lowest = trainable.lowest_backward_group(layout);
  double flops = 0;
  for (const TensorInfo& t : layout.tensors()) {
    if (t.group == layout.embed_group()) continue;  // a lookup (tied: the head's GEMM uncounted)
    const bool backward = layout.compute_unit_of(t.group) >= lowest;
    const bool trains = trainable.trains(layout.index_of(t));  // a trained tensor runs a backward
    if (t.role == TensorRole::kLoraMagnitude) {
      // DoRA (model/llama_lora.cpp): the input times the base weight again, formed once more in
      // the backward beside ((g − 1)⊙dy)·W; the magnitude's own ops are elementwise.
      const auto shape = lora_projection_shape(config, static_cast<LoraTarget>(t.lora_target));
      flops += (backward ? 6.0 : 2.0) * static_cast<double>(shape[0] * shape[1]);
      continue;
    }
    flops += (2.0 + (backward ? 2.0 : 0.0) + (trains ? 2.0 : 0.0)) * static_cast<double>(t.numel);
  }
  const double attention_forward = 4.0 * static_cast<double>(config.num_heads) *
                                   static_cast<double>(config.head_dim()) *
                                   static_cast<double>(seq_len);
  for (int l = 0; l < config.num_layers; ++l)
    flops += attention_forward * (layout.layer_group(l) >= lowest ? 3.0 : 1.0);
  return flops;
}

}  // namespace zt

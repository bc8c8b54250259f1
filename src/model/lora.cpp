#include "model/lora.h"

#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <utility>

#include "util/closest_name.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

// By LoraTarget's value.
constexpr const char* kTargetNames[kLoraTargets] = {"q_proj",    "k_proj",    "v_proj",
                                                    "o_proj",    "gate_proj", "up_proj",
                                                    "down_proj", "qkv_proj",  "gate_up_proj"};
constexpr const char* kTargetModules[kLoraTargets] = {
    "self_attn.q_proj", "self_attn.k_proj",   "self_attn.v_proj",
    "self_attn.o_proj", "mlp.gate_proj",      "mlp.up_proj",
    "mlp.down_proj",    "self_attn.qkv_proj", "mlp.gate_up_proj"};

// The target names of one kind of model (Llama's, Phi-3's or GLM's), then all-linear.
std::string model_targets(FusedModules fused) {
  std::string s;
  for (LoraTarget t : kLoraTargetsInLayerOrder)
    if (lora_target_in_model(t, fused))
      s += std::string(s.empty() ? "" : ", ") + lora_target_name(t);
  return s + ", all-linear";
}

std::string known_targets() {
  return model_targets({}) + "; Phi-3's " + model_targets({true, true}) + "; GLM's " +
         model_targets({false, true});
}

// How a model with fused modules stores its projections, for a message that found none.
std::string fused_note(FusedModules fused) {
  if (fused.qkv)
    return "; Phi-3 fuses q, k, v into qkv_proj and gate, up into gate_up_proj, and PEFT adapts "
           "each fused module as one";
  if (fused.gate_up)
    return "; GLM fuses gate and up into gate_up_proj, and PEFT adapts it as one module";
  return "";
}

// The target a PEFT module name selects: its last component, or its last two (self_attn.q_proj).
int target_index(const std::string& name) {
  for (int i = 0; i < kLoraTargets; ++i)
    if (name == kTargetNames[i] || name == kTargetModules[i]) return i;
  return -1;
}

std::string lower_case(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// Whether a module name holds a layer index: "layers.N." at its start or after a dot.
bool names_a_layer(const std::string& name) {
  const size_t dot = name.rfind(".layers.");
  const size_t at = dot != std::string::npos ? dot + 1 : name.rfind("layers.", 0);
  return at != std::string::npos && std::isdigit(static_cast<unsigned char>(name[at + 7]));
}

bool is_null_or(const nlohmann::json& v, bool (*empty)(const nlohmann::json&)) {
  return v.is_null() || empty(v);
}

// A key of adapter_config.json whose non-default value changes the adapters' math: `ok` says
// whether the value is the one zerotrain implements.
void refuse_unless(const nlohmann::json& j, const char* key, bool ok, const std::string& source,
                   const std::string& why) {
  ZT_CHECK(ok, source + ": key '" + key + "' = " + quoted_json(j.at(key)) + " is not supported (" +
                   why + ")");
}

}  // namespace

const std::array<LoraTarget, kLoraTargets> kLoraTargetsInLayerOrder = {
    LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,      LoraTarget::kQkv, LoraTarget::kO,
    LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kGateUp, LoraTarget::kDown};

bool lora_target_in_model(LoraTarget t, FusedModules fused) {
  switch (t) {
    case LoraTarget::kO:
    case LoraTarget::kDown:
      return true;
    case LoraTarget::kQkv:
      return fused.qkv;
    case LoraTarget::kGateUp:
      return fused.gate_up;
    case LoraTarget::kGate:
    case LoraTarget::kUp:
      return !fused.gate_up;
    default:  // q, k, v
      return !fused.qkv;
  }
}

const char* lora_target_name(LoraTarget t) {
  return kTargetNames[static_cast<int>(t)];
}
const char* lora_target_module(LoraTarget t) {
  return kTargetModules[static_cast<int>(t)];
}

std::string lora_module_path(int64_t layer, LoraTarget t) {
  return "model.layers." + std::to_string(layer) + "." + lora_target_module(t);
}

bool LoraSpec::targets_any() const {
  for (bool b : targets)
    if (b) return true;
  return false;
}

float LoraSpec::scale() const {
  return scale_of({rank, alpha});
}

void LoraSpec::validate(const std::string& source) const {
  ZT_CHECK(rank > 0,
           source + ": the LoRA rank must be a positive integer, got " + std::to_string(rank));
  ZT_CHECK(std::isfinite(alpha) && alpha > 0,
           source + ": lora_alpha must be a positive number, got " + shortest_decimal(alpha));
  ZT_CHECK(std::isfinite(dropout) && dropout >= 0 && dropout < 1,
           source + ": lora_dropout must be in [0, 1), got " + shortest_decimal(dropout));
  ZT_CHECK(targets_any(), source + ": no LoRA target module (known: " + known_targets() + ")");
}

void LoraSpec::check_biases(bool qkv_bias, bool o_bias) const {
  if (!enabled() || bias == "none") return;
  const bool all = bias == "all";
  const bool qkv =
      qkv_bias && (all || has(LoraTarget::kQ) || has(LoraTarget::kK) || has(LoraTarget::kV));
  const bool o = o_bias && (all || has(LoraTarget::kO));
  ZT_CHECK(!qkv && !o, bias_source.text + " would train this model's " +
                           (qkv ? std::string("q/k/v") : std::string("o_proj")) +
                           " biases: zerotrain trains no biases in LoRA (\"none\")");
}

namespace {

// PEFT's target_modules regular expression, compiled by RE2; refused naming `source` where RE2
// cannot read it (look-around, back-references: Python's re has them, RE2 does not).
std::unique_ptr<RE2> compiled_target_pattern(const std::string& regex, const std::string& source) {
  // Python reads x{,n} as x{0,n}; RE2 reads "{,n}" as those characters.
  for (size_t at = regex.find("{,"); at != std::string::npos; at = regex.find("{,", at + 1)) {
    size_t backslashes = 0;
    while (backslashes < at && regex[at - 1 - backslashes] == '\\') ++backslashes;
    ZT_CHECK(backslashes % 2 == 1, source + ": target_modules " + quoted_json(regex) +
                                       " repeats with '{,': Python reads x{,n} as x{0,n}, RE2 as "
                                       "the characters; write {0,n}");
  }
  auto re = std::make_unique<RE2>(regex, RE2::Quiet);
  ZT_CHECK(re->ok(), source + ": target_modules " + quoted_json(regex) +
                         " is a regular expression RE2 cannot read (" + re->error() +
                         "): zerotrain matches it as PEFT does, whole against each module path, "
                         "but without look-around or back-references; list the modules instead "
                         "(known: " +
                         known_targets() + ")");
  return re;
}

// The layers a target_modules pattern is tried on before a model is known: more than any decoder
// has (LoraSpec::fit_to_layers then reads it on the model's own).
constexpr int64_t kPatternProbeLayers = 1024;

// The projections of `layer` whose module paths the pattern matches whole (Python's fullmatch).
std::array<bool, kLoraTargets> pattern_targets(const RE2& re, int64_t layer) {
  std::array<bool, kLoraTargets> t{};
  for (int i = 0; i < kLoraTargets; ++i)
    t[static_cast<size_t>(i)] =
        RE2::FullMatch(lora_module_path(layer, static_cast<LoraTarget>(i)), re);
  return t;
}

// The module paths of a model that hold no projection an adapter can sit on: the embedding and
// LM head (which train in full instead), the model's other modules, then layer l's (containers,
// norms, activation, each attention's rotary embedding; Qwen3's q/k norms with qk_norm, Gemma 2's
// norms around the MLP with sandwich), as
// transformers 4.46 names them (GLM's as 4.49 and 4.57 do): Llama's rotary embedding is also the
// model's (since 4.45), Phi-3's attention has its dropouts beside it; GLM's layers have no rotary
// embedding, and GLM-4's norms on the outputs are post_self_attn_layernorm and post_mlp_layernorm.
const std::vector<std::string> kEmbeddingAndHead = {"model.embed_tokens", "lm_head"};
std::vector<std::string> model_modules(const LoraModelModules& m) {
  if (m.fused.qkv) return {"model", "model.layers", "model.norm", "model.embed_dropout"};
  return {"model", "model.layers", "model.norm", "model.rotary_emb"};
}
std::vector<std::string> layer_modules(int64_t layer, const LoraModelModules& m) {
  const std::string l = "model.layers." + std::to_string(layer);
  std::vector<std::string> modules = {l, l + ".self_attn", l + ".mlp",
                                      l + ".post_attention_layernorm"};
  if (!m.glm) modules.push_back(l + ".self_attn.rotary_emb");
  if (m.pre_norms) modules.push_back(l + ".input_layernorm");
  modules.push_back(l + (m.fused.gate_up ? ".mlp.activation_fn" : ".mlp.act_fn"));
  if (m.fused.qkv)
    modules.insert(modules.end(), {l + ".resid_attn_dropout", l + ".resid_mlp_dropout"});
  if (m.qk_norm) modules.insert(modules.end(), {l + ".self_attn.q_norm", l + ".self_attn.k_norm"});
  if (m.sandwich_norms && m.glm) {  // GLM-4's (post_attention_layernorm precedes the MLP)
    modules.insert(modules.end(), {l + ".post_self_attn_layernorm", l + ".post_mlp_layernorm"});
  } else if (m.sandwich_norms) {  // Gemma 2's and OLMo 2's (post_attention_layernorm is above)
    modules.push_back(l + ".post_feedforward_layernorm");
    if (m.pre_norms) modules.push_back(l + ".pre_feedforward_layernorm");  // Gemma 2's
  }
  return modules;
}

}  // namespace

void LoraSpec::check_target_pattern(const LoraModelModules& model) const {
  if (target_pattern.regex.empty()) return;
  const auto re = compiled_target_pattern(target_pattern.regex, target_pattern.source);
  const std::string says =
      target_pattern.source + ": target_modules " + quoted_json(target_pattern.regex) + " selects ";
  for (const std::string& module : kEmbeddingAndHead)
    ZT_CHECK(!RE2::FullMatch(module, *re),
             says + "'" + module +
                 "': zerotrain adapts the decoder layers' projections; the embedding and the LM "
                 "head train in full through modules_to_save");
  std::vector<std::string> others = model_modules(model);
  for (int64_t layer = 0; layer < model.num_layers; ++layer)
    for (std::string& module : layer_modules(layer, model)) others.push_back(std::move(module));
  for (const std::string& module : others)
    ZT_CHECK(!RE2::FullMatch(module, *re),
             says + "'" + module + "', which is no linear layer (PEFT refuses to adapt it too)");
}

std::array<bool, kLoraTargets> LoraSpec::parse_targets(const std::vector<std::string>& names,
                                                       const std::string& source) {
  std::array<bool, kLoraTargets> t{};
  for (const std::string& name : names) {
    if (name == "all-linear") {
      t.fill(true);
      continue;
    }
    const int i = target_index(name);
    ZT_CHECK(i >= 0 || !names_a_layer(name),
             source + ": '" + name +
                 "' names one layer's module (PEFT adapts that layer alone); zerotrain reads "
                 "layers from layers_to_transform or a target_modules regular expression: name "
                 "the projection without the layer (known: " +
                 known_targets() + ")");
    ZT_CHECK(name != "all", source +
                                ": 'all' (LLaMA-Factory's word for every linear layer) is "
                                "PEFT's 'all-linear' here");
    // ('.' is no sign: PEFT's names may be dotted suffixes, mlp.fc1.)
    const bool pattern = name.find_first_of("*+?[]()|^$\\") != std::string::npos;
    ZT_CHECK(i >= 0, source + ": '" + name +
                         "' is not a projection zerotrain can adapt (known: " + known_targets() +
                         "; the embedding and the LM head train in full through modules_to_save" +
                         (pattern ? "; a regular expression is read as PEFT reads one, from "
                                    "target_modules as a string in --lora-config's file"
                                  : "") +
                         ")");
    t[static_cast<size_t>(i)] = true;
  }
  return t;
}

void LoraSpec::set_targets(const std::vector<std::string>& names, const std::string& source) {
  targets = parse_targets(names, source);
  target_pattern.source = source;
  target_pattern.all_linear = std::find(names.begin(), names.end(), "all-linear") != names.end();
}

std::string LoraSpec::fit_to_model(FusedModules fused, const std::string& model_type) {
  if (!enabled()) return "";
  std::string dropped;
  std::array<bool, kLoraTargets> fitted{};
  for (LoraTarget t : kLoraTargetsInLayerOrder) {
    const auto i = static_cast<size_t>(t);
    fitted[i] = targets[i] && lora_target_in_model(t, fused);
    if (targets[i] && !fitted[i])
      dropped += std::string(dropped.empty() ? "" : ", ") + lora_target_name(t);
  }
  // Named as given: "FILE: target_modules \"REGEX\"", or "FILE target_modules: q_proj,v_proj"
  // (--lora-targets: q_proj,v_proj).
  const bool selected = target_pattern.all_linear || !target_pattern.regex.empty();
  const std::string given =
      target_pattern.source + ": " +
      (selected ? "target_modules " + quoted_json(target_pattern.regex) : targets_text());
  targets = fitted;
  const std::string projections = model_targets(fused);
  ZT_CHECK(targets_any(), given + ": a " + model_type +
                              " model has no such projection (its projections: " + projections +
                              ")" + fused_note(fused));
  if (selected || dropped.empty()) return "";
  return given + ": a " + model_type + " model has no " + dropped +
         " (its projections: " + projections + "); as PEFT does, zerotrain adapts " +
         targets_text() + " alone";
}

std::string LoraSpec::targets_as_given() const {
  if (target_pattern.all_linear) return "all-linear";
  return target_pattern.regex.empty() ? targets_text() : target_pattern.regex;
}

void LoraSpec::check_fits_model(FusedModules fused, const std::string& model_type) const {
  for (LoraTarget t : kLoraTargetsInLayerOrder)
    ZT_CHECK(!has(t) || lora_target_in_model(t, fused),
             "LoRA target " + std::string(lora_target_name(t)) + ": a " + model_type +
                 " model has no such projection (its projections: " + model_targets(fused) + ")");
}

namespace {

// init_lora_weights of an adapter config: for adapters to initialise, PEFT's default alone; for
// trained adapters, any initialisation that kept the base model's weights (the adapter's
// tensors are then the whole difference). Refused naming the key.
void check_init_lora_weights(const nlohmann::json& j, const std::string& source,
                             LoraSpec::Use use) {
  if (!j.contains("init_lora_weights") || j["init_lora_weights"] == true) return;
  const nlohmann::json& init = j["init_lora_weights"];
  ZT_CHECK(use == LoraSpec::Use::kTrainedWeights,
           source + ": key 'init_lora_weights' is " + quoted_json(init) +
               ": zerotrain initialises as PEFT's default (true: A Kaiming-uniform, B zero)");
  const std::string name = lower_case(init.is_string() ? init.get<std::string>() : "");  // as PEFT
  for (const char* moves_base : {"pissa", "olora", "loftq", "corda"})
    ZT_CHECK(name.rfind(moves_base, 0) != 0,
             source + ": key 'init_lora_weights' is " + quoted_json(init) +
                 ": that initialisation moved part of the base model's weights into the "
                 "adapter, which fits only that changed base; PEFT converts it to a plain LoRA "
                 "adapter (save_pretrained with path_initial_model_for_weight_conversion)");
  ZT_CHECK(init == false || name == "gaussian" || name == "eva",
           source + ": key 'init_lora_weights' is " + quoted_json(init) +
               ", an initialisation zerotrain does not know to leave the base model as it was "
               "(known: true, false, \"gaussian\", \"eva\")");
}

// Every key of PEFT's LoraConfig and of the PeftConfig it extends, PEFT 0.2 to 0.20 and its main
// branch after 0.20.0 (kasa_config; enable_lora and merge_weights are 0.2's).
const std::vector<std::string> kPeftLoraKeys = {"task_type",
                                                "peft_type",
                                                "auto_mapping",
                                                "peft_version",
                                                "base_model_name_or_path",
                                                "revision",
                                                "inference_mode",
                                                "r",
                                                "target_modules",
                                                "exclude_modules",
                                                "lora_alpha",
                                                "lora_dropout",
                                                "fan_in_fan_out",
                                                "bias",
                                                "use_rslora",
                                                "modules_to_save",
                                                "init_lora_weights",
                                                "layers_to_transform",
                                                "layers_pattern",
                                                "rank_pattern",
                                                "alpha_pattern",
                                                "megatron_config",
                                                "megatron_core",
                                                "trainable_token_indices",
                                                "loftq_config",
                                                "eva_config",
                                                "corda_config",
                                                "lora_ga_config",
                                                "use_dora",
                                                "velora_config",
                                                "alora_invocation_tokens",
                                                "use_qalora",
                                                "qalora_group_size",
                                                "monteclora_config",
                                                "layer_replication",
                                                "runtime_config",
                                                "lora_bias",
                                                "target_parameters",
                                                "use_bdlora",
                                                "arrow_config",
                                                "kasa_config",
                                                "ensure_weight_tying",
                                                "enable_lora",
                                                "merge_weights"};

// A key PEFT does not know but one of its keys is near: a misspelling, refused naming the key it
// is near (PEFT 0.13 refuses any unknown key; from 0.14 it ignores one with a warning, so a
// misspelt lora_alpha would silently train at the default).
void refuse_misspelt_keys(const nlohmann::json& j, const std::string& source) {
  for (const std::string& key : LoraSpec::unknown_peft_keys(j)) {
    const std::string near = closest_name(key, kPeftLoraKeys);
    ZT_CHECK(near.empty(), source + ": unknown key '" + key + "'; did you mean '" + near +
                               "'? (no key of PEFT's LoraConfig; read past, it would leave '" +
                               near + "' at its default)");
  }
}

// The keys of LoRA variants, and of per-layer settings, whose non-default values change the
// adapters' math away from plain LoRA and DoRA: refused naming the key.
void refuse_lora_variants(const nlohmann::json& j, const std::string& source) {
  auto empty_container = [](const nlohmann::json& v) { return v.empty(); };
  auto is_false = [](const nlohmann::json& v) { return v.is_boolean() && !v.get<bool>(); };
  auto never = [](const nlohmann::json&) { return false; };  // only null (absent) is plain LoRA
  const std::pair<const char*, bool (*)(const nlohmann::json&)> math_keys[] = {
      {"fan_in_fan_out", is_false},
      {"lora_bias", is_false},
      {"layer_replication", empty_container},
      {"trainable_token_indices", empty_container},
      {"target_parameters", empty_container},
      {"use_qalora", is_false},            // QALoRA's pooled input
      {"use_bdlora", is_false},            // block-diagonal LoRA (a BdLoraConfig when used)
      {"alora_invocation_tokens", never},  // aLoRA (even with []): adapted after the tokens
      {"velora_config", never},            // VeLoRA's compressed-activation backward
      {"monteclora_config", never},        // MonteCLoRA's sampled adapters
      {"arrow_config", never},             // Arrow's routing among adapters
      {"kasa_config", never}};             // KaSA's singular values between A and B
  for (const auto& [key, ok] : math_keys)
    if (j.contains(key))
      refuse_unless(j, key, is_null_or(j[key], ok), source,
                    "zerotrain trains plain LoRA and DoRA: no QALoRA, aLoRA, VeLoRA, MonteCLoRA, "
                    "KaSA, Arrow or block-diagonal variant, no bias or fan-in/fan-out weights, no "
                    "replicated layers");
}

}  // namespace

LoraSpec LoraSpec::from_peft_json(const nlohmann::json& j, const std::string& source, Use use) {
  ZT_CHECK(j.is_object(), source + ": an adapter config must be a JSON object");
  if (j.contains("peft_type"))  // first: another method's keys are no misspelt LoRA keys
    refuse_unless(j, "peft_type", j["peft_type"] == "LORA", source, "only LoRA adapters");
  refuse_misspelt_keys(j, source);
  LoraSpec s;
  auto number = [&](const char* key, double fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    ZT_CHECK(j[key].is_number(),
             source + ": key '" + key + "' must be a number, got " + quoted_json(j[key]));
    return j[key].get<double>();
  };
  if (!j.contains("r") && !j.contains("peft_type")) {  // another tool's file under PEFT's name
    std::string keys;
    int listed = 0;
    for (const auto& [key, value] : j.items())
      if (++listed <= 8) keys += (keys.empty() ? "'" : ", '") + key.substr(0, 80) + "'";
    if (listed > 8) keys += " and " + std::to_string(listed - 8) + " more";
    fail(source + ": neither 'peft_type' nor 'r' (the LoRA rank): not a PEFT LoRA adapter config" +
         (keys.empty() ? std::string(" (an empty object)") : " (its keys: " + keys + ")"));
  }
  ZT_CHECK(j.contains("r"), source + ": missing required key 'r' (the LoRA rank)");
  ZT_CHECK(j["r"].is_number_integer(),
           source + ": key 'r' must be an integer, got " + quoted_json(j["r"]));
  s.rank = j["r"].get<int64_t>();
  s.alpha = number("lora_alpha", 8.0);
  s.dropout = number("lora_dropout", 0.0);
  auto boolean = [&](const char* key) {
    if (!j.contains(key) || j[key].is_null()) return false;
    ZT_CHECK(j[key].is_boolean(), source + ": key '" + key + "' must be true or false");
    return j[key].get<bool>();
  };
  s.use_rslora = boolean("use_rslora");
  s.use_dora = boolean("use_dora");
  s.ensure_weight_tying = boolean("ensure_weight_tying");
  const nlohmann::json targets = j.value("target_modules", nlohmann::json());
  std::vector<std::string> names;
  // PEFT compares all-linear in any case.
  const bool all_linear =
      targets.is_string() && lower_case(targets.get<std::string>()) == "all-linear";
  if (targets.is_string() && !all_linear) {
    // PEFT reads a string other than all-linear as a regular expression over module paths.
    s.target_pattern = {targets.get<std::string>(), source};
    // The projections it selects in some layer (fit_to_layers narrows them to a model's layers).
    const auto re = compiled_target_pattern(s.target_pattern.regex, source);
    for (int64_t layer = 0; layer < kPatternProbeLayers; ++layer) {
      const std::array<bool, kLoraTargets> here = pattern_targets(*re, layer);
      for (size_t t = 0; t < here.size(); ++t) s.targets[t] = s.targets[t] || here[t];
    }
    ZT_CHECK(s.targets_any(),
             source + ": target_modules " + quoted_json(targets) +
                 " selects no projection (PEFT matches it whole against module paths such as " +
                 lora_module_path(0, LoraTarget::kQ) + "; known: " + known_targets() + ")");
  } else if (targets.is_string()) {
    names.push_back("all-linear");
  } else if (targets.is_array()) {
    for (const auto& n : targets) {
      ZT_CHECK(n.is_string(), source + ": target_modules holds " + quoted_json(n));
      names.push_back(n.get<std::string>());
    }
  } else {
    // PEFT's default for Llama-family models.
    ZT_CHECK(targets.is_null(),
             source + ": target_modules must be a list of names, got " + quoted_json(targets));
    names = {"q_proj", "v_proj"};
  }
  if (s.target_pattern.regex.empty())
    s.set_targets(names, source + (targets.is_null() ? " (no target_modules: PEFT's default for "
                                                       "Llama-family models)"
                                                     : " target_modules"));
  s.read_layer_keys(j, source);
  const nlohmann::json save = j.value("modules_to_save", nlohmann::json());
  if (save.is_array())
    for (const auto& n : save) {
      ZT_CHECK(n.is_string(), source + ": modules_to_save holds " + quoted_json(n));
      s.modules_to_save.push_back(n.get<std::string>());
    }
  else
    ZT_CHECK(save.is_null(), source + ": modules_to_save must be a list of names");
  refuse_lora_variants(j, source);
  if (j.contains("bias") && !j["bias"].is_null()) {
    const nlohmann::json& bias = j["bias"];
    refuse_unless(j, "bias", bias == "none" || bias == "lora_only" || bias == "all", source,
                  "PEFT's values are none, lora_only and all");
    s.bias = bias.get<std::string>();
    s.bias_source.text = source + ": key 'bias' = " + quoted_json(bias);
  }
  check_init_lora_weights(j, source, use);
  s.validate(source);
  return s;
}

std::vector<std::string> LoraSpec::unknown_peft_keys(const nlohmann::json& j) {
  std::vector<std::string> unknown;
  if (j.is_object())
    for (const auto& item : j.items())
      if (std::find(kPeftLoraKeys.begin(), kPeftLoraKeys.end(), item.key()) == kPeftLoraKeys.end())
        unknown.push_back(item.key());
  return unknown;
}

LoraSpec LoraSpec::from_peft_file(const std::string& path, nlohmann::json* parsed, Use use) {
  std::error_code ec;
  const std::filesystem::path given(path), run_dir = given.parent_path();
  ZT_CHECK(
      std::filesystem::is_regular_file(path, ec),
      "adapter config '" + path + "' is not a file" +
          (std::filesystem::is_regular_file(run_dir / "final" / given.filename(), ec)
               ? " (a training run's output: its adapter is '" + (run_dir / "final").string() + "')"
               : ""));
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "cannot open adapter config '" + path + "'");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  nlohmann::json j = parse_json(text, path);
  LoraSpec spec = from_peft_json(j, path, use);
  if (parsed) *parsed = std::move(j);
  return spec;
}

nlohmann::json LoraSpec::to_json() const {
  nlohmann::json targets = nlohmann::json::array();
  for (LoraTarget t : kLoraTargetsInLayerOrder)
    if (has(t)) targets.push_back(lora_target_name(t));
  nlohmann::json j = {
      {"r", rank},
      {"lora_alpha", alpha},
      {"lora_dropout", dropout},
      {"use_rslora", use_rslora},
      {"target_modules", targets},
      {"modules_to_save",
       modules_to_save.empty() ? nlohmann::json() : nlohmann::json(modules_to_save)}};
  if (use_dora) j["use_dora"] = true;
  if (ensure_weight_tying) j["ensure_weight_tying"] = true;  // absent before the key was read
  write_layer_keys(j);
  if (bias != "none") j["bias"] = bias;  // one the model has no biases for (check_biases)
  return j;
}

nlohmann::json LoraSpec::to_peft_json(const std::string& base_model_name_or_path) const {
  nlohmann::json j = to_json();
  j.update({{"peft_type", "LORA"},
            {"task_type", "CAUSAL_LM"},
            {"base_model_name_or_path", base_model_name_or_path},
            {"bias", "none"},  // a bias setting is accepted only where it trains nothing
            {"fan_in_fan_out", false},
            {"init_lora_weights", true},
            {"use_dora", use_dora},
            {"inference_mode", true}});
  return j;
}

std::string LoraSpec::targets_text() const {
  std::string s;
  for (LoraTarget t : kLoraTargetsInLayerOrder)
    if (has(t)) s += std::string(s.empty() ? "" : ",") + lora_target_name(t);
  return s;
}

}  // namespace zt

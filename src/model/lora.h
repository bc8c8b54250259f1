// LoRA adapters (docs/lora.md): the specification of the low-rank adapters trained beside a frozen
// base, in Hugging Face PEFT's terms. A targeted projection y = x·Wᵀ becomes
//   y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ,   A [r, in], B [out, r],   s = alpha/r (alpha/√r with rslora)
// with A Kaiming-uniform (PEFT's default: U(−1/√in, 1/√in)) and B zero, so training starts from
// the base model's outputs. The adapters of decoder layer l form a parameter group of their own
// (model/layout.h); their tensors carry PEFT's module names under the layer, e.g.
// model.layers.3.self_attn.q_proj.lora_A.weight.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zt {

// The projections an adapter can sit on; names as PEFT's target_modules. A Llama-family layer has
// q, k, v, o, gate, up and down; Phi-3's checkpoint fuses q, k and v into qkv_proj and gate and up
// into gate_up_proj, which PEFT adapts as one module each: one A on the shared input, one B whose
// rows are the parts' (q, k, v; gate, up), as the fused weight's are. (The values index dropout
// masks: backend/dropout_hash.h; the fused ones come last so that the others keep theirs.)
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown, kQkv, kGateUp };
constexpr int kLoraTargets = 9;
// Every target in a decoder layer's order (q, k, v, qkv, o, gate, up, gate_up, down): the order of
// the adapters' tensors and of target lists.
extern const std::array<LoraTarget, kLoraTargets> kLoraTargetsInLayerOrder;
const char* lora_target_name(LoraTarget t);  // "q_proj", ..., "down_proj", "qkv_proj"
// "self_attn.q_proj", ..., "mlp.down_proj": the module's path inside a decoder layer.
const char* lora_target_module(LoraTarget t);
// Which of a layer's projections a model's checkpoint holds as one module, which PEFT adapts
// whole: Phi-3's q/k/v (self_attn.qkv_proj) and gate/up (mlp.gate_up_proj); GLM's gate/up alone.
struct FusedModules {
  bool qkv = false;
  bool gate_up = false;
};
// Whether the target is a projection of a model that fuses `fused` (Phi-3: qkv_proj, o_proj,
// gate_up_proj, down_proj; GLM: q_proj, k_proj, v_proj, o_proj, gate_up_proj, down_proj; Llama:
// q_proj, ..., down_proj).
bool lora_target_in_model(LoraTarget t, FusedModules fused);

// The modules of a model that a target_modules regular expression could select besides its
// projections (LoraSpec::check_target_pattern): its layers, and which norms each layer has.
struct LoraModelModules {
  int64_t num_layers = 0;
  FusedModules fused;
  bool qk_norm = false;         // Qwen3's, Gemma 3's and OLMo 2's q_norm and k_norm
  bool sandwich_norms = false;  // norms on the attention's and the MLP's outputs
  bool pre_norms = true;        // input_layernorm and the norm before the MLP (not OLMo 2's)
  bool glm = false;             // GLM's names: post_self_attn_layernorm, post_mlp_layernorm
};

// One projection's adapter as PEFT resolves a spec on a model (LoraSpec::adapters): its rank
// and alpha, rank 0 where no adapter sits.
struct LoraAdapter {
  int64_t rank = 0;
  double alpha = 0;
  bool present() const { return rank > 0; }
  bool operator==(const LoraAdapter&) const = default;
};

struct LoraSpec {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 8.0;
  double dropout = 0.0;  // on the adapters' input while training (backend/dropout_hash.h)
  bool use_rslora = false;
  // PEFT's use_dora (model/llama_lora.cpp): each adapted projection's output rows rescaled by a
  // trained magnitude over the norm of that row of W + s·B·A.
  bool use_dora = false;
  std::array<bool, kLoraTargets> targets{};  // which projections carry an adapter
  // PEFT's modules_to_save: module names (e.g. lm_head) whose tensors train in full beside the
  // adapters; the app turns them into --trainable patterns.
  std::vector<std::string> modules_to_save;
  // PEFT's ensure_weight_tying (PEFT 0.18 and later): a modules_to_save embedding of a model
  // that ties its LM head to it stays tied, the shared matrix training, as zerotrain trains it.
  bool ensure_weight_tying = false;
  // PEFT's bias: "none", or "lora_only" (the biases of the adapted projections train too) or
  // "all" (every bias trains), which a model without such biases trains as "none";
  // check_biases says which. bias_source names the file and key for its refusal: where the spec
  // was read, not part of what it is (equal whatever it holds).
  std::string bias = "none";
  struct SourceNote {
    std::string text;
    bool operator==(const SourceNote&) const { return true; }
  } bias_source;
  // PEFT's target_modules given as a regular expression, which PEFT matches whole against every
  // module path of the model (model.layers.3.self_attn.q_proj, lm_head, ...): `targets` holds
  // the projections it selects in some layer, adapters() those of each layer, and
  // check_target_pattern that it selects nothing else. Like bias_source, a note of how the spec
  // was written (with the file and key, for messages), equal whatever it holds unless per_layer.
  // all_linear: target_modules was all-linear, which selects every projection the model has.
  // With a list of names (set_targets), source names the option or the file and key.
  // per_layer: the pattern selects other projections in some layers than in others
  // (fit_to_layers says, on the model's layers); the regex is then part of what the adapters
  // are, compared and written back as target_modules.
  struct TargetPattern {
    std::string regex, source;
    bool all_linear = false;
    bool per_layer = false;
    bool operator==(const TargetPattern& o) const {
      return per_layer == o.per_layer && (!per_layer || regex == o.regex);
    }
  } target_pattern;
  // PEFT's layers_to_transform (model/lora_layers.cpp): with target_modules a list, the decoder
  // layers whose listed projections get adapters (empty: every layer), each module's layer index
  // read from its path as PEFT reads it, after one of layers_pattern's names (a regular
  // expression; none given: after any name).
  std::vector<int64_t> layers_to_transform;
  std::vector<std::string> layers_pattern;
  // PEFT's rank_pattern and alpha_pattern: another r or lora_alpha for the modules a key matches
  // (a regular expression over the end of the module path, whole components: "v_proj",
  // "layers.3.mlp.down_proj").
  std::map<std::string, int64_t> rank_pattern;
  std::map<std::string, double> alpha_pattern;
  // PEFT's exclude_modules (0.14 and later): modules never adapted, by name (a module path, or
  // its last components after a dot) or, written as a string (exclude_pattern), a regular
  // expression matched whole against the path.
  std::vector<std::string> exclude_modules;
  bool exclude_pattern = false;
  SourceNote layers_source;  // the file these were read from, for messages

  bool enabled() const { return rank > 0; }
  bool targets_any() const;
  // Whether some layer adapts t (every layer, unless layers or patterns choose).
  bool has(LoraTarget t) const { return targets[static_cast<size_t>(t)]; }
  // The scale s of the adapter's product: alpha/r, or alpha/√r with use_rslora; scale_of is one
  // adapter's, with its own rank and alpha (rank_pattern, alpha_pattern).
  float scale() const;
  float scale_of(const LoraAdapter& a) const;
  // Each decoder layer's adapters on a model of num_layers layers, [layer][LoraTarget], as PEFT
  // resolves the spec module by module: the targets (a pattern's in each layer, a list's in the
  // layers of layers_to_transform), each with its rank_pattern and alpha_pattern values, their
  // keys matched as PEFT 0.15 and later match them. Throws naming the module and the keys where
  // two keys of a pattern give it different values (PEFT takes the first in the file's order,
  // which this does not keep).
  std::vector<std::array<LoraAdapter, kLoraTargets>> adapters(int64_t num_layers) const;
  // Fits the spec, fitted to the model's projections (fit_to_model), to its layers: a
  // target_modules pattern's targets become the projections it selects in some layer
  // (per_layer when not in all). Throws naming the keys where no projection is adapted in any
  // layer (check_layers), or where adapters() refuses. Returns a warning, or "": of the
  // layers of layers_to_transform the model lacks (PEFT adapts the others), of modules PEFT
  // 0.13 or 0.14 would give another rank or alpha, or of exclude_modules excluding nothing.
  std::string fit_to_layers(int64_t num_layers);
  // Throws naming the keys that chose nothing (layers_to_transform, layers_pattern,
  // exclude_modules) where no module of a model of num_layers layers is adapted.
  void check_layers(int64_t num_layers) const;
  // check_layers on the adapters() of a model (table): throws unless one is present.
  void refuse_none_adapted(const std::vector<std::array<LoraAdapter, kLoraTargets>>& table) const;
  // Reads layers_to_transform, layers_pattern, rank_pattern, alpha_pattern and exclude_modules
  // of a PEFT adapter config into this spec, refusing ill-typed values (and, as PEFT 0.17 refuses
  // them, layers_to_transform or layers_pattern beside a target_modules string, layers_pattern
  // without layers_to_transform) naming the key.
  void read_layer_keys(const nlohmann::json& j, const std::string& source);
  // Writes them back, those given, and a per_layer pattern as target_modules.
  void write_layer_keys(nlohmann::json& j) const;
  // " in layers 1, 3" / " (rank_pattern, alpha_pattern)" for messages: how the layers vary.
  std::string layers_text() const;
  // Throws naming the option (or key) when the rank, alpha, dropout or targets are unusable.
  void validate(const std::string& source) const;
  // Throws naming bias_source when `bias` would train biases this model has: the q/k/v biases
  // (qkv_bias) or the o bias (o_bias) of adapted projections, or any with "all". zerotrain trains
  // no biases in LoRA; on a model without them PEFT trains none either.
  void check_biases(bool qkv_bias, bool o_bias) const;
  // Throws naming target_pattern.source when the pattern selects a module that is no decoder
  // projection (the embedding, the LM head, a norm: those `model` has).
  void check_target_pattern(const LoraModelModules& model) const;
  // Fits the targets to a model's projections as PEFT matches target_modules against the modules
  // the model has: all-linear and a regular expression select among them; of listed names, those
  // that are projections of the other kind of model (q_proj on Phi-3, qkv_proj on Llama) are
  // dropped with a warning when another name selects a projection (PEFT adapts those alone) and
  // refused naming the model's projections when none does. `model_type` names the model in
  // messages. Fitted targets are unchanged by it. Returns the warning to print (on one rank),
  // or "".
  std::string fit_to_model(FusedModules fused, const std::string& model_type);
  // Throws naming a target the model has no projection for (a spec not fitted to it).
  void check_fits_model(FusedModules fused, const std::string& model_type) const;

  // Targets from PEFT's target_modules spelling as a list: module names ("q_proj", also as
  // "self_attn.q_proj") or "all-linear" (every projection of the decoder layers, of both kinds
  // until fit_to_model; the LM head is never adapted, as in PEFT). Throws naming the unknown
  // name and listing the known ones; `source` names the option or file. (A string other than
  // all-linear is a regular expression, which from_peft_json reads.)
  static std::array<bool, kLoraTargets> parse_targets(const std::vector<std::string>& names,
                                                      const std::string& source);
  // targets = parse_targets(names, source), noting all-linear in target_pattern.
  void set_targets(const std::vector<std::string>& names, const std::string& source);
  // What an adapter_config.json is read for: adapters a run initialises (--lora-config), or the
  // trained ones beside it (--lora-init-from, eval and generate --adapter, --merge-lora).
  enum class Use { kInitialise, kTrainedWeights };
  // A PEFT adapter_config.json (peft_type LORA). Keys that would change the adapters' math away
  // from what zerotrain implements (a bias, fan_in_fan_out, a LoRA variant other than DoRA) are
  // refused naming the key, as is a key that is no LoraConfig key but near one (a
  // misspelling); a target_modules regular expression is read with RE2 (Python's syntax without
  // look-around or back-references); layers_to_transform, layers_pattern, rank_pattern and
  // alpha_pattern are read (read_layer_keys); keys that only describe the
  // adapter (task_type, base_model_name_or_path, revision, ...) are read past. init_lora_weights:
  // to initialise, PEFT's default (true) alone, the one zerotrain draws; for trained weights,
  // any initialisation that left the base model as it was (true, false, "gaussian", "eva"),
  // and those that moved part of the base into the adapter (PiSSA, OLoRA, LoftQ, CorDA) or are
  // unknown refused saying so.
  static LoraSpec from_peft_json(const nlohmann::json& j, const std::string& source,
                                 Use use = Use::kInitialise);
  // The keys of an adapter config that are none of PEFT's LoraConfig (PEFT 0.2 to 0.20): in a
  // config from_peft_json accepted (which refuses those near a known key as misspellings), a
  // newer PEFT's, read past as PEFT 0.14 and later read past keys they do not know, with a
  // warning (io/peft_adapter_file.h).
  static std::vector<std::string> unknown_peft_keys(const nlohmann::json& j);
  // The file at `path`; with `parsed`, its JSON is handed back too (for the keys this reads past).
  static LoraSpec from_peft_file(const std::string& path, nlohmann::json* parsed = nullptr,
                                 Use use = Use::kInitialise);
  // r, lora_alpha, lora_dropout, use_rslora, target_modules and modules_to_save (and
  // use_dora and ensure_weight_tying when true, the layer keys given: write_layer_keys): what
  // from_peft_json reads back into this specification.
  nlohmann::json to_json() const;
  // The adapter_config.json PEFT writes for this specification.
  nlohmann::json to_peft_json(const std::string& base_model_name_or_path) const;
  // Comma-separated target names in layer order ("q_proj,v_proj"), for messages and run.json.
  std::string targets_text() const;
  // The targets as target_modules gave them: "all-linear", the regular expression, or
  // targets_text() (all-linear and a pattern select among a model's projections once fitted).
  std::string targets_as_given() const;

  bool operator==(const LoraSpec&) const = default;
};

// The Hugging Face module path of a target in layer l: model.layers.{l}.self_attn.q_proj.
std::string lora_module_path(int64_t layer, LoraTarget t);

}  // namespace zt

#include "app/lora_options.h"

#include <re2/re2.h>

#include <filesystem>

#include "app/cli.h"
#include "io/peft_adapter_file.h"
#include "model/init.h"
#include "util/error.h"

namespace zt {

namespace po = boost::program_options;

namespace {

constexpr const char* kLoraOptionNames[] = {"lora-rank",    "lora-alpha", "lora-dropout",
                                            "lora-targets", "use-rslora", "use-dora"};

}  // namespace

nlohmann::json LoraOptions::to_json(const LoraSpec& s) const {
  if (rank == 0 && config_file.empty() && init_from.empty()) return nullptr;
  nlohmann::json j = {
      {"rank", s.rank},
      {"alpha", s.alpha},
      {"dropout", s.dropout},
      {"use_rslora", s.use_rslora},
      {"use_dora", s.use_dora},
      // as given: all-linear and a pattern select among the model's projections
      {"targets", s.targets_as_given()},
      {"modules_to_save", s.modules_to_save},
      {"config", config_file.empty() ? nlohmann::json() : nlohmann::json(config_file)},
      {"init_from", init_from.empty() ? nlohmann::json() : nlohmann::json(init_from)}};
  s.write_layer_keys(j);      // layers_to_transform, rank_pattern, ...: those given
  j.erase("target_modules");  // a by-layer pattern: "targets" holds it
  return j;
}

void add_lora_options(po::options_description& options, LoraOptions& o) {
  options.add_options()(
      "lora-rank", po::value(&o.rank)->default_value(o.rank),
      "LoRA: train rank-R adapters on the frozen model's projections (0: no adapters; "
      "docs/lora.md)")("lora-alpha", decimal_option(&o.alpha),
                       "LoRA: the adapters' alpha; their products are scaled by alpha/R "
                       "(default 8, as PEFT)")(
      "lora-dropout", decimal_option(&o.dropout),
      "LoRA: dropout on the adapters' input while training, its masks seeded by --seed and "
      "keyed by the global token, so every world size and stage drops the same elements")(
      "lora-targets", po::value(&o.targets)->default_value(o.targets),
      "LoRA: the projections that get adapters, as PEFT's target_modules: comma-separated "
      "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (Phi-3: qkv_proj, "
      "o_proj, gate_up_proj, down_proj; GLM: gate_up_proj for gate and up), or all-linear")(
      "use-rslora", bool_flag(&o.use_rslora, false),
      "LoRA: rank-stabilised scaling alpha/sqrt(R) instead of alpha/R")(
      "use-dora", bool_flag(&o.use_dora, false),
      "LoRA: DoRA, PEFT's use_dora: each adapted projection's output rows rescaled by a trained "
      "magnitude over the norm of that row of W + s·B·A")(
      "lora-config", po::value(&o.config_file),
      "LoRA: a PEFT adapter_config.json giving r, lora_alpha, target_modules, use_rslora, "
      "use_dora and modules_to_save, and which layers and modules take which rank and alpha "
      "(layers_to_transform, rank_pattern, alpha_pattern, exclude_modules; instead of the "
      "--lora-* options)")(
      "lora-init-from", po::value(&o.init_from),
      "LoRA: start from a PEFT adapter directory (adapter_config.json and "
      "adapter_model.safetensors, e.g. a run's OUT/final) and continue training it");
}

void note_lora_options_given(const po::variables_map& vm, LoraOptions& o) {
  o.given.clear();
  for (const char* name : kLoraOptionNames)
    if (vm.count(name) && !vm[name].defaulted()) o.given.push_back(name);
}

namespace {

// The adapter config at `path`, read once for `use`: its specification, and the base model it
// names.
LoraSpec spec_from_adapter_config(const std::string& path, std::string* named_base_model,
                                  LoraSpec::Use use) {
  nlohmann::json parsed;
  LoraSpec spec = read_peft_adapter_config(path, use, &parsed);
  const auto named = parsed.find("base_model_name_or_path");
  if (named_base_model && named != parsed.end() && named->is_string())
    *named_base_model = named->get<std::string>();
  return spec;
}

}  // namespace

LoraSpec resolve_lora_spec(const LoraOptions& o, std::string* named_base_model) {
  if (named_base_model) named_base_model->clear();
  if (!o.init_from.empty()) {
    ZT_CHECK(o.config_file.empty() && o.given.empty(),
             "--lora-init-from '" + o.init_from + "' brings its adapter_config.json; give no " +
                 (o.config_file.empty() ? "--" + o.given.front() : "--lora-config") + " beside it");
    return spec_from_adapter_config(lora_spec_source(o), named_base_model,
                                    LoraSpec::Use::kTrainedWeights);
  }
  if (!o.config_file.empty()) {
    ZT_CHECK(o.given.empty(), "--lora-config '" + o.config_file + "' and --" + o.given.front() +
                                  " both specify the adapters; give one or the other");
    return spec_from_adapter_config(o.config_file, named_base_model, LoraSpec::Use::kInitialise);
  }
  LoraSpec s;
  if (o.rank == 0) {
    for (const std::string& option : o.given)
      ZT_CHECK(option == "lora-rank",
               "--" + option + " needs --lora-rank R (R > 0) or --lora-config");
    return s;
  }
  s.rank = o.rank;
  s.alpha = o.alpha;
  s.dropout = o.dropout;
  s.use_rslora = o.use_rslora;
  s.use_dora = o.use_dora;
  s.set_targets(split_commas(o.targets), "--lora-targets");
  s.validate("--lora-rank/--lora-alpha/--lora-dropout/--lora-targets");
  return s;
}

std::string LoraStartSource::description() const {
  return adapter_ ? adapter_->description() : base_ ? base_->description() : "initialisation";
}

void LoraStartSource::read_range_f32(const TensorInfo& t, int64_t begin, int64_t count,
                                     float* out) {
  if (adapter_ && adapter_->holds(t))
    adapter_->read_range_f32(t, begin, count, out);
  else if (base_ && base_->holds(t))
    base_->read_range_f32(t, begin, count, out);
  else
    init_tensor_range(config_, t, seed_, begin, count, out);
}

bool LoraStartSource::holds(const TensorInfo& t) const {
  return t.role != TensorRole::kLoraMagnitude || (adapter_ && adapter_->holds(t));
}

void check_adapter_option(const po::variables_map& vm, const std::string& dir,
                          const char* command) {
  std::error_code ec;
  ZT_CHECK(vm.count("adapter") == 0 || std::filesystem::is_directory(dir, ec),
           std::string(command) + ": --adapter '" + dir + "' is not a directory (a PEFT " +
               "adapter directory holds " + kPeftConfigFile + " and " + kPeftWeightsFile + ")");
}

std::string lora_spec_source(const LoraOptions& o) {
  return o.init_from.empty() ? o.config_file : o.init_from + "/" + kPeftConfigFile;
}

std::vector<std::string> modules_to_save_patterns(const LoraSpec& spec, const ParamLayout& layout,
                                                  const std::string& source) {
  std::vector<std::string> patterns;
  for (const std::string& name : spec.modules_to_save) {
    const std::string says = source + ": modules_to_save names '" + name + "'";
    // PEFT compares the name with the end of each module's name in the PEFT model.
    const auto selects = [&](const std::string& module) {
      return ("base_model.model." + module).ends_with(name);
    };
    bool any = false;
    for (const TensorInfo& t : layout.tensors()) {
      const std::string module = t.name.substr(0, t.name.rfind('.'));
      if (t.is_lora() || !selects(module)) continue;
      ZT_CHECK(t.layer < 0, says + ", which selects " + module +
                                " (PEFT takes every module whose name ends with it): with LoRA "
                                "a decoder layer's own tensors stay frozen (the final norm is "
                                "'model.norm')");
      // PEFT trains a copy of a tied embedding apart from the head unless told to keep the tie.
      ZT_CHECK(
          t.role != TensorRole::kEmbedding || !layout.tied_embeddings() || spec.ensure_weight_tying,
          says +
              " on a model that ties its LM head to the embedding: PEFT would train a "
              "copy of the embedding apart from the head, which zerotrain does not; "
              "ensure_weight_tying: true (PEFT 0.18 and later) trains the shared matrix, "
              "as zerotrain does");
      patterns.push_back("^" + RE2::QuoteMeta(t.name) + "$");
      any = true;
    }
    ZT_CHECK(any || !layout.tied_embeddings() || !selects("lm_head"),
             says +
                 ", but this model ties its LM head to model.embed_tokens "
                 "(tie_word_embeddings): name 'embed_tokens', with ensure_weight_tying: true, "
                 "to train the shared matrix");
    ZT_CHECK(any, says +
                      ", which selects no module holding a tensor of the model (e.g. "
                      "'lm_head', 'embed_tokens', 'model.norm')");
  }
  return patterns;
}

}  // namespace zt

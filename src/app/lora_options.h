// train's LoRA options (docs/lora.md): --lora-rank, --lora-alpha, --lora-dropout,
// --lora-targets, --use-rslora, --use-dora, or a PEFT adapter_config.json through --lora-config;
// resolved into the model's LoraSpec (model/lora.h) and the --trainable patterns of PEFT's
// modules_to_save.
#pragma once
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json_fwd.hpp>

#include "model/layout.h"
#include "model/lora.h"
#include "model/tensor_source.h"

namespace zt {

struct LoraOptions {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 8.0;
  double dropout = 0.0;
  std::string targets = "q_proj,v_proj";  // PEFT's default for Llama-family models
  bool use_rslora = false;
  bool use_dora = false;
  std::string config_file;  // --lora-config adapter_config.json
  std::string init_from;    // --lora-init-from DIR: a PEFT adapter directory to continue
  // Which of the options above were given on the command line (refused beside --lora-config).
  std::vector<std::string> given;

  // run.json's record: `resolved`, the spec resolve_lora_spec made of these options (read once),
  // and where it came from.
  nlohmann::json to_json(const LoraSpec& resolved) const;
};

void add_lora_options(boost::program_options::options_description& options, LoraOptions& o);
// After parsing: records which --lora-* options were given.
void note_lora_options_given(const boost::program_options::variables_map& vm, LoraOptions& o);
// The adapters the options ask for (rank 0: none). Throws naming the option or the file's key.
// With `named_base_model`, the base_model_name_or_path the options' adapter_config.json
// (--lora-config, --lora-init-from) names, from the same read ("" when there is none): PEFT keeps
// a Hub id there that AutoPeftModelForCausalLM loads, which the adapters train writes keep.
LoraSpec resolve_lora_spec(const LoraOptions& o, std::string* named_base_model = nullptr);
// The values a LoRA run starts from: the adapter directory's tensors (--lora-init-from), else
// the base's (a model directory, or the seed's initialisation without one), adapters it lacks
// from their initialisation.
class LoraStartSource : public TensorSource {
 public:
  LoraStartSource(const ModelConfig& config, TensorSource* base, TensorSource* adapter,
                  uint64_t seed)
      : config_(config), base_(base), adapter_(adapter), seed_(seed) {}
  const ModelConfig& config() const override { return config_; }
  std::string description() const override;
  // Every tensor but a DoRA magnitude no adapter holds: the engine starts it from the base rows
  // it works with (ZeroEngine::load_from).
  bool holds(const TensorInfo& t) const override;
  void read_range_f32(const TensorInfo& t, int64_t begin, int64_t count, float* out) override;

 private:
  ModelConfig config_;
  TensorSource *base_, *adapter_;
  uint64_t seed_;
};

// PEFT's modules_to_save as --trainable patterns of `layout`'s tensors, each the exact name of a
// tensor of a module that the name selects as PEFT selects it: every module whose full name ends
// with it ("lm_head" → lm_head.weight, "embed_tokens" → model.embed_tokens.weight, "norm" → the
// final norm and every layer's norms). Refused naming `source` (the adapter_config.json) and the
// name: a name that selects no module (on a model whose LM head is tied to the embedding,
// "lm_head" says so), or a decoder layer's own module (frozen with LoRA).
std::vector<std::string> modules_to_save_patterns(const LoraSpec& spec, const ParamLayout& layout,
                                                  const std::string& source);
// eval's and generate's --adapter DIR, when given: refused naming `command` unless DIR is a
// directory.
void check_adapter_option(const boost::program_options::variables_map& vm, const std::string& dir,
                          const char* command);
// The adapter_config.json the options' LoRA specification came from ("" when none).
std::string lora_spec_source(const LoraOptions& o);

}  // namespace zt

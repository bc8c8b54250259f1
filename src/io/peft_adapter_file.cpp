#include "io/peft_adapter_file.h"

#include <cmath>
#include <filesystem>
#include <iostream>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/mpi_runtime.h"
#include "util/error.h"

namespace zt {

std::string peft_weights_path(const std::string& dir) {
  std::error_code ec;
  for (const char* file : {kPeftWeightsFile, kPeftPytorchWeightsFile})
    if (std::filesystem::is_regular_file(dir + "/" + file, ec)) return dir + "/" + file;
  fail("PEFT adapter '" + dir + "' has neither " + kPeftWeightsFile + " nor " +
       kPeftPytorchWeightsFile);
}

LoraSpec read_peft_adapter_config(const std::string& path, LoraSpec::Use use,
                                  nlohmann::json* parsed) {
  nlohmann::json j;
  LoraSpec spec = LoraSpec::from_peft_file(path, &j, use);
  if (is_rank_zero_of_launch())
    for (const std::string& key : LoraSpec::unknown_peft_keys(j))
      std::cerr << "warning: " << path << ": key '" << key
                << "' is no PEFT LoraConfig key zerotrain knows (PEFT 0.2 to 0.20); read past, "
                   "as PEFT 0.14 and later read past keys they do not know\n";
  if (parsed) *parsed = std::move(j);
  return spec;
}

ModelConfig adapter_model_config(const std::string& dir, ModelConfig base) {
  const std::string warning = base.set_lora(
      read_peft_adapter_config(dir + "/" + kPeftConfigFile, LoraSpec::Use::kTrainedWeights));
  if (!warning.empty() && is_rank_zero_of_launch()) std::cerr << "warning: " << warning << "\n";
  return base;
}

PeftAdapterReader::PeftAdapterReader(const std::string& dir, const ModelConfig& model)
    : dir_(dir), config_(model), layout_(config_), file_(peft_weights_path(dir)) {
  ZT_CHECK(config_.lora.enabled(),
           "PEFT adapter directory '" + dir + "': the model it is opened for has no LoRA adapters");
  const std::string prefix = kPeftNamePrefix;
  for (const StoredTensor& e : file_.tensors()) {
    ZT_CHECK(e.name.rfind(prefix, 0) == 0, file_.path() + ": tensor '" + e.name +
                                               "' does not start with PEFT's '" + prefix + "'");
    const std::string name = e.name.substr(prefix.size());
    const int t = layout_.find(name);
    const bool magnitude = name.ends_with(".lora_magnitude_vector");
    ZT_CHECK(t >= 0, file_.path() + ": tensor '" + e.name + "' is not a tensor of the " +
                         config_.model_type() + " model with these adapters (" +
                         config_.lora.targets_text() + config_.lora.layers_text() + ", r " +
                         std::to_string(config_.lora.rank) + ")" +
                         (magnitude && !config_.lora.use_dora
                              ? ": a DoRA magnitude, and " + std::string(kPeftConfigFile) +
                                    " has no use_dora: true"
                              : ""));
    const TensorInfo& info = layout_.tensors()[static_cast<size_t>(t)];
    ZT_CHECK(e.shape == info.shape, file_.path() + ": tensor '" + e.name + "' has shape " +
                                        nlohmann::json(e.shape).dump() + ", the model's is " +
                                        nlohmann::json(info.shape).dump());
    // PEFT applies a trained copy of a tied embedding to the embedding alone, the head keeping
    // the base's matrix, unless ensure_weight_tying trains the shared one (zerotrain's model).
    ZT_CHECK(info.role != TensorRole::kEmbedding || !layout_.tied_embeddings() ||
                 config_.lora.ensure_weight_tying,
             file_.path() + ": tensor '" + e.name + "' is a trained copy of the embedding, " +
                 "which this model ties to its LM head: PEFT applies it to the embedding alone, " +
                 "which zerotrain does not (with ensure_weight_tying: true in " + kPeftConfigFile +
                 ", PEFT 0.18 and later train and apply the shared matrix)");
    names_[name] = e.name;
  }
  for (const TensorInfo& t : layout_.tensors())
    ZT_CHECK(!t.is_lora() || names_.count(t.name),
             file_.path() + ": no tensor '" + prefix + t.name + "', which adapter_config.json (" +
                 config_.lora.targets_text() + config_.lora.layers_text() +
                 (t.role == TensorRole::kLoraMagnitude ? ", use_dora: true" : "") + ") implies");
}

void PeftAdapterReader::read_range_f32(const TensorInfo& t, int64_t begin, int64_t count,
                                       float* out) {
  const auto it = names_.find(t.name);
  ZT_CHECK(it != names_.end(), description() + " has no tensor '" + t.name + "'");
  file_.read_range_f32(it->second, begin, count, out);
  for (int64_t i = 0; i < count; ++i)
    ZT_CHECK(std::isfinite(out[i]), file_.path() + ": tensor '" + it->second +
                                        "' holds a non-finite value (NaN or infinity) at element " +
                                        std::to_string(begin + i));
}

std::vector<std::string> PeftAdapterReader::base_tensors() const {
  std::vector<std::string> out;
  for (const auto& [name, file_name] : names_)
    if (layout_.tensors()[static_cast<size_t>(layout_.find(name))].is_lora() == false)
      out.push_back(name);
  return out;
}

}  // namespace zt

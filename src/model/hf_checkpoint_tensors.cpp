#include "model/hf_checkpoint_tensors.h"

#include <map>
#include <utility>

#include "util/error.h"

namespace zt {

std::vector<HfCheckpointTensor> hf_checkpoint_tensors(const ParamLayout& layout) {
  const FusedModules fused = layout.config().fused_modules();
  std::vector<HfCheckpointTensor> out;
  std::map<std::string, size_t> fused_index;  // fused name -> its entry in `out`
  const std::vector<TensorInfo>& tensors = layout.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    // A Phi-3 layer's q, k, v and gate, up (GLM's gate, up): parts of the module a LoRA adapter
    // also takes whole.
    const ProjectionModule module =
        t.layer >= 0 ? projection_module(t.role, fused) : ProjectionModule{};
    const auto target = static_cast<LoraTarget>(module.target);
    if (target != LoraTarget::kQkv && target != LoraTarget::kGateUp) {
      out.push_back({t.name, t.shape, {static_cast<int>(i)}});
      continue;
    }
    const std::string name = lora_module_path(t.layer, target) + ".weight";
    auto [it, added] = fused_index.emplace(name, out.size());
    if (added) out.push_back({name, {0, t.shape[1]}, {}});
    HfCheckpointTensor& whole = out[it->second];
    // The layout holds a layer's parts in the fused order (q, k, v; gate, up).
    ZT_CHECK(static_cast<int>(whole.parts.size()) == module.part,
             "hf_checkpoint_tensors: " + t.name + " out of the fused order");
    whole.parts.push_back(static_cast<int>(i));
    whole.shape[0] += t.shape[0];
  }
  return out;
}

std::vector<HfCheckpointPlace> hf_checkpoint_places(const ParamLayout& layout) {
  std::vector<HfCheckpointPlace> places(layout.tensors().size());
  for (const HfCheckpointTensor& stored : hf_checkpoint_tensors(layout)) {
    int64_t offset = 0;
    for (int part : stored.parts) {
      places[static_cast<size_t>(part)] = {stored.name, offset};
      offset += layout.tensors()[static_cast<size_t>(part)].numel;
    }
  }
  return places;
}

std::map<std::string, HfCheckpointPlace> hf_checkpoint_places_by_name(const ParamLayout& layout) {
  const std::vector<HfCheckpointPlace> places = hf_checkpoint_places(layout);
  std::map<std::string, HfCheckpointPlace> out;
  for (size_t i = 0; i < places.size(); ++i) out[layout.tensors()[i].name] = places[i];
  return out;
}

}  // namespace zt

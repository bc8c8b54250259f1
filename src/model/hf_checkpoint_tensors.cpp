#include "model/hf_checkpoint_tensors.h"

#include <map>
#include <utility>

#include "util/error.h"

namespace zt {

namespace {

// The fused tensor a layout tensor of a Phi-3 layer belongs to (its name after "model.layers.N."),
// and its place among the parts.
struct FusedMember {
  TensorRole role;
  const char* suffix;
  int position;
};

constexpr FusedMember kFusedMembers[] = {
    {TensorRole::kQProj, "self_attn.qkv_proj.weight", 0},
    {TensorRole::kKProj, "self_attn.qkv_proj.weight", 1},
    {TensorRole::kVProj, "self_attn.qkv_proj.weight", 2},
    {TensorRole::kGateProj, "mlp.gate_up_proj.weight", 0},
    {TensorRole::kUpProj, "mlp.gate_up_proj.weight", 1},
};

const FusedMember* fused_member(TensorRole role) {
  for (const FusedMember& m : kFusedMembers)
    if (m.role == role) return &m;
  return nullptr;
}

}  // namespace

std::vector<HfCheckpointTensor> hf_checkpoint_tensors(const ParamLayout& layout) {
  const bool fused = layout.config().fused_projections;
  std::vector<HfCheckpointTensor> out;
  std::map<std::string, size_t> fused_index;  // fused name -> its entry in `out`
  const std::vector<TensorInfo>& tensors = layout.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    const FusedMember* member = fused && t.layer >= 0 ? fused_member(t.role) : nullptr;
    if (!member) {
      out.push_back({t.name, t.shape, {static_cast<int>(i)}});
      continue;
    }
    const std::string name = "model.layers." + std::to_string(t.layer) + "." + member->suffix;
    auto [it, added] = fused_index.emplace(name, out.size());
    if (added) out.push_back({name, {0, t.shape[1]}, {}});
    HfCheckpointTensor& whole = out[it->second];
    // The layout holds a layer's parts in the fused order (q, k, v; gate, up).
    ZT_CHECK(static_cast<int>(whole.parts.size()) == member->position,
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

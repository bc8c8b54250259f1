#include "model/layout.h"

#include "util/error.h"

namespace zt {

ParamLayout::ParamLayout(const ModelConfig& c) : config_(c) {
  c.validate();
  const int64_t d = c.hidden_size, f = c.intermediate_size, kv = c.kv_dim(), qd = c.q_dim();
  groups_.resize(static_cast<size_t>(c.num_layers + 2));
  layer_roles_.assign(static_cast<size_t>(c.num_layers), {});
  for (auto& roles : layer_roles_) roles.fill(-1);
  groups_[0].name = "embed";
  add(0, "model.embed_tokens.weight", {c.vocab_size, d}, TensorRole::kEmbedding, -1, false);
  for (int l = 0; l < c.num_layers; ++l) {
    const int g = layer_group(l);
    groups_[static_cast<size_t>(g)].name = "layer." + std::to_string(l);
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(g, p + "input_layernorm.weight", {d}, TensorRole::kInputNorm, l, false);
    add(g, p + "self_attn.q_proj.weight", {qd, d}, TensorRole::kQProj, l, true);
    add(g, p + "self_attn.k_proj.weight", {kv, d}, TensorRole::kKProj, l, true);
    add(g, p + "self_attn.v_proj.weight", {kv, d}, TensorRole::kVProj, l, true);
    add(g, p + "self_attn.o_proj.weight", {d, qd}, TensorRole::kOProj, l, true);
    add(g, p + "post_attention_layernorm.weight", {d}, TensorRole::kPostAttnNorm, l, false);
    add(g, p + "mlp.gate_proj.weight", {f, d}, TensorRole::kGateProj, l, true);
    add(g, p + "mlp.up_proj.weight", {f, d}, TensorRole::kUpProj, l, true);
    add(g, p + "mlp.down_proj.weight", {d, f}, TensorRole::kDownProj, l, true);
    if (c.qkv_bias) {
      add(g, p + "self_attn.q_proj.bias", {qd}, TensorRole::kQBias, l, false);
      add(g, p + "self_attn.k_proj.bias", {kv}, TensorRole::kKBias, l, false);
      add(g, p + "self_attn.v_proj.bias", {kv}, TensorRole::kVBias, l, false);
    }
    if (c.o_bias) add(g, p + "self_attn.o_proj.bias", {d}, TensorRole::kOBias, l, false);
    if (c.qk_norm) {
      add(g, p + "self_attn.q_norm.weight", {c.head_dim()}, TensorRole::kQNorm, l, false);
      add(g, p + "self_attn.k_norm.weight", {c.head_dim()}, TensorRole::kKNorm, l, false);
    }
  }
  const int h = head_group();
  groups_[static_cast<size_t>(h)].name = "head";
  add(h, "model.norm.weight", {d}, TensorRole::kFinalNorm, -1, false);
  if (!c.tie_word_embeddings)
    add(h, "lm_head.weight", {c.vocab_size, d}, TensorRole::kLmHead, -1, true);
}

void ParamLayout::add(int group, const std::string& name, std::vector<int64_t> shape,
                      TensorRole role, int layer, bool decay) {
  TensorInfo t;
  t.name = name;
  t.numel = 1;
  for (int64_t s : shape) t.numel *= s;
  t.shape = std::move(shape);
  t.group = group;
  GroupInfo& g = groups_[static_cast<size_t>(group)];
  t.offset = g.numel;
  t.role = role;
  t.layer = layer;
  t.weight_decay = decay;
  g.numel += t.numel;
  g.tensors.push_back(static_cast<int>(tensors_.size()));
  if (layer >= 0)
    layer_roles_[static_cast<size_t>(layer)][static_cast<size_t>(
        static_cast<int>(role) - static_cast<int>(TensorRole::kInputNorm))] =
        static_cast<int>(tensors_.size());
  tensors_.push_back(std::move(t));
}

int ParamLayout::find(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return static_cast<int>(i);
  return -1;
}

const TensorInfo& ParamLayout::tensor(TensorRole role, int layer) const {
  switch (role) {
    case TensorRole::kEmbedding:
      return tensors_[0];
    case TensorRole::kFinalNorm:
      return tensors_[static_cast<size_t>(groups_.back().tensors.front())];
    case TensorRole::kLmHead:
      return tied_embeddings() ? tensors_[0] : tensors_[tensors_.size() - 1];
    default: {
      const TensorInfo* t = find_role(role, layer);
      ZT_CHECK(t != nullptr, "layer " + std::to_string(layer) +
                                 " has no tensor of this role in a " + config_.model_type() +
                                 " model");
      return *t;
    }
  }
}

const TensorInfo* ParamLayout::find_role(TensorRole role, int layer) const {
  const int slot = static_cast<int>(role) - static_cast<int>(TensorRole::kInputNorm);
  ZT_CHECK(slot >= 0 && slot < kLayerRoles, "find_role: not a decoder layer's role");
  ZT_CHECK(layer >= 0 && layer < config_.num_layers, "layer index out of range");
  const int index = layer_roles_[static_cast<size_t>(layer)][static_cast<size_t>(slot)];
  return index < 0 ? nullptr : &tensors_[static_cast<size_t>(index)];
}

int64_t ParamLayout::total_numel() const {
  int64_t n = 0;
  for (const auto& g : groups_) n += g.numel;
  return n;
}

int64_t ParamLayout::non_embedding_numel() const {
  return total_numel() - groups_[0].numel;
}

}  // namespace zt

#include "model/layout.h"

#include "util/error.h"

namespace zt {

ParamLayout::ParamLayout(const ModelConfig& c) : config_(c) {
  c.validate();
  const int64_t d = c.hidden_size, f = c.intermediate_size, kv = c.kv_dim(), qd = c.q_dim();
  const bool lora = c.lora.enabled();
  groups_.resize(static_cast<size_t>(c.num_layers + 2 + (lora ? c.num_layers : 0)));
  layer_roles_.assign(static_cast<size_t>(c.num_layers), {});
  for (auto& roles : layer_roles_) roles.fill(-1);
  groups_[0].name = "embed";
  add(0, "model.embed_tokens.weight", {c.vocab_size, d}, TensorRole::kEmbedding, -1, false);
  for (int l = 0; l < c.num_layers; ++l) {
    const int g = layer_group(l);
    groups_[static_cast<size_t>(g)].name = "layer." + std::to_string(l);
    const std::string p = "model.layers." + std::to_string(l) + ".";
    if (c.pre_norms) add(g, p + "input_layernorm.weight", {d}, TensorRole::kInputNorm, l, false);
    add(g, p + "self_attn.q_proj.weight", {qd, d}, TensorRole::kQProj, l, true);
    add(g, p + "self_attn.k_proj.weight", {kv, d}, TensorRole::kKProj, l, true);
    add(g, p + "self_attn.v_proj.weight", {kv, d}, TensorRole::kVProj, l, true);
    add(g, p + "self_attn.o_proj.weight", {d, qd}, TensorRole::kOProj, l, true);
    if (c.sandwich_norms && c.is_glm()) {  // GLM-4's: post_attention_layernorm precedes the MLP
      add(g, p + "post_self_attn_layernorm.weight", {d}, TensorRole::kAttnOutNorm, l, false);
      add(g, p + "post_attention_layernorm.weight", {d}, TensorRole::kPostAttnNorm, l, false);
    } else if (c.sandwich_norms) {  // Gemma 2's names: the norm before the MLP is its "pre" one
      add(g, p + "post_attention_layernorm.weight", {d}, TensorRole::kAttnOutNorm, l, false);
      if (c.pre_norms)  // OLMo 2 has none
        add(g, p + "pre_feedforward_layernorm.weight", {d}, TensorRole::kPostAttnNorm, l, false);
    } else {
      add(g, p + "post_attention_layernorm.weight", {d}, TensorRole::kPostAttnNorm, l, false);
    }
    add(g, p + "mlp.gate_proj.weight", {f, d}, TensorRole::kGateProj, l, true);
    add(g, p + "mlp.up_proj.weight", {f, d}, TensorRole::kUpProj, l, true);
    add(g, p + "mlp.down_proj.weight", {d, f}, TensorRole::kDownProj, l, true);
    if (c.sandwich_norms)
      add(g, p + (c.is_glm() ? "post_mlp_layernorm.weight" : "post_feedforward_layernorm.weight"),
          {d}, TensorRole::kMlpOutNorm, l, false);
    if (c.qkv_bias) {
      add(g, p + "self_attn.q_proj.bias", {qd}, TensorRole::kQBias, l, false);
      add(g, p + "self_attn.k_proj.bias", {kv}, TensorRole::kKBias, l, false);
      add(g, p + "self_attn.v_proj.bias", {kv}, TensorRole::kVBias, l, false);
    }
    if (c.o_bias) add(g, p + "self_attn.o_proj.bias", {d}, TensorRole::kOBias, l, false);
    if (c.qk_norm) {  // each head's (Qwen3, Gemma 3) or a token's whole projection's (OLMo 2)
      const int64_t q_norm = c.qk_norm_spans_heads ? qd : c.head_dim();
      const int64_t k_norm = c.qk_norm_spans_heads ? kv : c.head_dim();
      add(g, p + "self_attn.q_norm.weight", {q_norm}, TensorRole::kQNorm, l, false);
      add(g, p + "self_attn.k_norm.weight", {k_norm}, TensorRole::kKNorm, l, false);
    }
  }
  const int h = head_group();
  groups_[static_cast<size_t>(h)].name = "head";
  add(h, "model.norm.weight", {d}, TensorRole::kFinalNorm, -1, false);
  if (!c.tie_word_embeddings)
    add(h, "lm_head.weight", {c.vocab_size, d}, TensorRole::kLmHead, -1, true);
  if (lora) add_adapters();
}

// Each adapted projection [out, in] gets A [r, in] and B [out, r] (r its own: rank_pattern), and
// with DoRA a magnitude [out]; all decay, as Hugging Face's Trainer decays every parameter but
// biases and norms. A layer whose projections carry none (layers_to_transform) keeps an empty
// group.
void ParamLayout::add_adapters() {
  const ModelConfig& c = config_;
  std::array<std::array<int, 3>, kLoraTargets> none;
  for (auto& ab : none) ab = {-1, -1, -1};
  lora_tensors_.assign(static_cast<size_t>(c.num_layers), none);
  lora_scales_.assign(static_cast<size_t>(c.num_layers), {});
  const auto adapters = c.lora.adapters(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    const int g = adapter_group(l);
    groups_[static_cast<size_t>(g)].name = "lora." + std::to_string(l);
    for (const LoraTarget target : kLoraTargetsInLayerOrder) {
      const int t = static_cast<int>(target);
      const LoraAdapter& adapter = adapters[static_cast<size_t>(l)][static_cast<size_t>(t)];
      if (!adapter.present()) continue;
      lora_scales_[static_cast<size_t>(l)][static_cast<size_t>(t)] = c.lora.scale_of(adapter);
      const auto [out, in] = lora_projection_shape(c, target);
      const std::string m = lora_module_path(l, target);
      auto& ab = lora_tensors_[static_cast<size_t>(l)][static_cast<size_t>(t)];
      ab[0] = static_cast<int>(tensors_.size());
      add(g, m + ".lora_A.weight", {adapter.rank, in}, TensorRole::kLoraA, -1, true);
      ab[1] = static_cast<int>(tensors_.size());
      add(g, m + ".lora_B.weight", {out, adapter.rank}, TensorRole::kLoraB, -1, true);
      if (c.lora.use_dora) {
        ab[2] = static_cast<int>(tensors_.size());
        add(g, m + ".lora_magnitude_vector", {out}, TensorRole::kLoraMagnitude, -1, true);
      }
      for (const int index : ab) {
        if (index < 0) continue;
        tensors_[static_cast<size_t>(index)].layer = l;
        tensors_[static_cast<size_t>(index)].lora_target = t;
      }
    }
  }
}

int ParamLayout::adapter_group(int layer) const {
  return config_.lora.enabled() ? 2 + static_cast<int>(config_.num_layers) + layer : -1;
}

int ParamLayout::compute_unit_of(int g) const {
  return g < num_compute_units() ? g : g - num_compute_units() + 1;
}

std::vector<int> ParamLayout::unit_groups(int u) const {
  std::vector<int> groups = {u};
  if (u > embed_group() && u < head_group() && config_.lora.enabled())
    groups.push_back(adapter_group(u - 1));
  if (u == head_group() && tied_embeddings()) groups.push_back(embed_group());
  return groups;
}

int ParamLayout::lora_tensor(int layer, int target, bool b) const {
  if (lora_tensors_.empty()) return -1;
  return lora_tensors_[static_cast<size_t>(layer)][static_cast<size_t>(target)][b ? 1 : 0];
}

int ParamLayout::lora_magnitude(int layer, int target) const {
  if (lora_tensors_.empty()) return -1;
  return lora_tensors_[static_cast<size_t>(layer)][static_cast<size_t>(target)][2];
}

float ParamLayout::lora_scale(int layer, int target) const {
  ZT_CHECK(lora_tensor(layer, target, false) >= 0,
           "layer " + std::to_string(layer) + " has no adapter on " +
               lora_target_name(static_cast<LoraTarget>(target)));
  return lora_scales_[static_cast<size_t>(layer)][static_cast<size_t>(target)];
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
  if (layer >= 0 && role < TensorRole::kFinalNorm)
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
      return tensors_[static_cast<size_t>(
          groups_[static_cast<size_t>(head_group())].tensors.front())];
    case TensorRole::kLmHead:
      return tied_embeddings() ? tensors_[0]
                               : tensors_[static_cast<size_t>(
                                     groups_[static_cast<size_t>(head_group())].tensors.back())];
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

namespace {

// The separate projections in LoraTarget's order (the fused targets come after them).
constexpr std::array<TensorRole, 7> kSeparateProjections = {
    TensorRole::kQProj,    TensorRole::kKProj,  TensorRole::kVProj,   TensorRole::kOProj,
    TensorRole::kGateProj, TensorRole::kUpProj, TensorRole::kDownProj};

}  // namespace

int lora_target_of(TensorRole role) {
  for (size_t t = 0; t < kSeparateProjections.size(); ++t)
    if (kSeparateProjections[t] == role) return static_cast<int>(t);
  return -1;
}

std::vector<TensorRole> lora_adapted_roles(LoraTarget t) {
  switch (t) {
    case LoraTarget::kQkv:
      return {TensorRole::kQProj, TensorRole::kKProj, TensorRole::kVProj};
    case LoraTarget::kGateUp:
      return {TensorRole::kGateProj, TensorRole::kUpProj};
    default:
      return {kSeparateProjections[static_cast<size_t>(t)]};
  }
}

namespace {

// [out, in] of a decoder layer's projection.
std::array<int64_t, 2> projection_shape(const ModelConfig& c, TensorRole role) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, kv = c.kv_dim(), qd = c.q_dim();
  switch (role) {
    case TensorRole::kQProj:
      return {qd, d};
    case TensorRole::kKProj:
    case TensorRole::kVProj:
      return {kv, d};
    case TensorRole::kOProj:
      return {d, qd};
    case TensorRole::kDownProj:
      return {d, f};
    default:  // gate and up
      return {f, d};
  }
}

}  // namespace

std::array<int64_t, 2> lora_projection_shape(const ModelConfig& c, LoraTarget t) {
  const std::vector<TensorRole> parts = lora_adapted_roles(t);
  int64_t out = 0;
  for (TensorRole part : parts) out += projection_shape(c, part)[0];
  return {out, projection_shape(c, parts.front())[1]};  // the parts share their input
}

std::vector<int64_t> lora_output_rows(const ModelConfig& c, LoraTarget t) {
  std::vector<int64_t> rows;
  for (TensorRole part : lora_adapted_roles(t)) rows.push_back(projection_shape(c, part)[0]);
  return rows;
}

ProjectionModule projection_module(TensorRole role, FusedModules fused) {
  for (const LoraTarget module : {LoraTarget::kQkv, LoraTarget::kGateUp}) {
    if (!lora_target_in_model(module, fused)) continue;
    const std::vector<TensorRole> parts = lora_adapted_roles(module);
    for (size_t i = 0; i < parts.size(); ++i)
      if (parts[i] == role) return {static_cast<int>(module), static_cast<int>(i)};
  }
  return {lora_target_of(role), 0};
}

ProjectionLora projection_lora(const ParamLayout& layout, TensorRole role, int layer) {
  const ModelConfig& c = layout.config();
  const ProjectionModule module = projection_module(role, c.fused_modules());
  const int a = module.target < 0 ? -1 : layout.lora_tensor(layer, module.target, false);
  if (a < 0) return {};
  const std::vector<int64_t> rows = lora_output_rows(c, static_cast<LoraTarget>(module.target));
  int64_t first_row = 0;
  for (int i = 0; i < module.part; ++i) first_row += rows[static_cast<size_t>(i)];
  return {a,
          layout.lora_tensor(layer, module.target, true),
          layout.lora_magnitude(layer, module.target),
          first_row,
          layout.tensors()[static_cast<size_t>(a)].shape[0],
          layout.lora_scale(layer, module.target)};
}

double training_flops_per_token(const ModelConfig& config, int64_t seq_len) {
  const double non_embedding = static_cast<double>(ParamLayout(config).non_embedding_numel());
  return 6.0 * non_embedding +
         12.0 * static_cast<double>(config.num_layers) * static_cast<double>(config.num_heads) *
             static_cast<double>(config.head_dim()) * static_cast<double>(seq_len);
}

}  // namespace zt

// Parameter layout: every tensor of the model, by its Hugging Face name, placed in one of a few
// flat contiguous groups. Group 0 is the embedding, groups 1..L are the decoder layers in order,
// group L+1 holds the final norm and the LM head. A layer holds Llama's nine tensors, then the
// family's extras when present (q/k/v biases, the o bias, Qwen3's q/k norms), so a Llama's layout
// is the same whatever the code knows about other families. The ZeRO engine partitions each group's
// flat buffer into equal shards; the model addresses tensors by (group, offset). Tied embeddings
// (tie_word_embeddings): there is no lm_head tensor; the head multiplies by the embedding table,
// one parameter in group 0 that the head group's forward and backward also use (the engine hands it
// over with the head group: LlamaModel::forward_group).
// LoRA (config.lora, model/lora.h): after the head come the adapter groups, one per decoder layer
// ("lora.3": A then B of each targeted projection, in the layer's order). A layer's adapters are
// computed with the layer: the model runs L + 2 compute units (embedding, layers, head), and the
// unit of layer l uses its layer group and its adapter group.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace zt {

// Role of a tensor inside a decoder layer (or the model's ends); the model uses it to find
// tensors without string lookups.
enum class TensorRole {
  kEmbedding,
  kInputNorm,
  kQProj,
  kKProj,
  kVProj,
  kOProj,
  kPostAttnNorm,
  kGateProj,
  kUpProj,
  kDownProj,
  // Present only in some families (ModelConfig): q/k/v/o biases, Qwen3's per-head q/k norms,
  // Gemma 2's norms of the attention's and the MLP's outputs (its post_attention_layernorm and
  // post_feedforward_layernorm; kPostAttnNorm, the norm before the MLP, is its
  // pre_feedforward_layernorm).
  kQBias,
  kKBias,
  kVBias,
  kOBias,
  kQNorm,
  kKNorm,
  kAttnOutNorm,
  kMlpOutNorm,
  kFinalNorm,
  kLmHead,
  // LoRA adapters (model/lora.h): A [r, in] and B [out, r] of one targeted projection, and with
  // DoRA its magnitude [out] (PEFT's lora_magnitude_vector).
  kLoraA,
  kLoraB,
  kLoraMagnitude,
};
// Roles of a decoder layer: kInputNorm .. kMlpOutNorm.
constexpr int kLayerRoles =
    static_cast<int>(TensorRole::kMlpOutNorm) - static_cast<int>(TensorRole::kInputNorm) + 1;

struct TensorInfo {
  std::string name;            // HF name, e.g. model.layers.3.mlp.up_proj.weight
  std::vector<int64_t> shape;  // HF shape, [out, in] for projections
  int64_t numel = 0;
  int group = 0;       // flat group index
  int64_t offset = 0;  // element offset inside its group's flat buffer
  TensorRole role = TensorRole::kEmbedding;
  int layer = -1;            // decoder layer index, -1 for embedding/final tensors
  bool weight_decay = true;  // AdamW decay: off for norms, biases and the embedding
  int lora_target = -1;      // kLoraA/kLoraB/kLoraMagnitude: the LoraTarget adapted
  bool is_output_projection() const {
    return role == TensorRole::kOProj || role == TensorRole::kDownProj;
  }
  bool is_bias() const { return role >= TensorRole::kQBias && role <= TensorRole::kOBias; }
  bool is_lora() const { return role >= TensorRole::kLoraA && role <= TensorRole::kLoraMagnitude; }
};

struct GroupInfo {
  std::string name;          // "embed", "layer.3", "head"
  int64_t numel = 0;         // unpadded element count
  std::vector<int> tensors;  // indices into ParamLayout::tensors, in offset order
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<GroupInfo>& groups() const { return groups_; }
  int num_groups() const { return static_cast<int>(groups_.size()); }
  int embed_group() const { return 0; }
  int layer_group(int layer) const { return 1 + layer; }
  int head_group() const { return 1 + static_cast<int>(config_.num_layers); }
  // The compute units (embedding, each layer, head): unit u is computed from group u and, for a
  // layer with adapters, its adapter group.
  int num_compute_units() const { return 2 + static_cast<int>(config_.num_layers); }
  // The adapter group of decoder layer `layer`, or -1 without LoRA.
  int adapter_group(int layer) const;
  // The compute unit whose forward and backward use group g.
  int compute_unit_of(int g) const;
  // The groups unit u reads, in the order a stage-3 pass acquires them: u itself, then the
  // layer's adapter group, or (tied embeddings, the head) the embedding.
  std::vector<int> unit_groups(int u) const;
  // The tensor index of adapter A (or B) of `target` in layer `layer`, or -1.
  int lora_tensor(int layer, int target, bool b) const;
  // The tensor index of that adapter's DoRA magnitude, or -1 (no adapter, or no DoRA).
  int lora_magnitude(int layer, int target) const;
  // The scale s of that adapter's product (LoraSpec::scale_of: its own rank and alpha).
  float lora_scale(int layer, int target) const;
  bool tied_embeddings() const { return config_.tie_word_embeddings; }
  const ModelConfig& config() const { return config_; }

  // Index of the tensor with this HF name, or -1.
  int find(const std::string& name) const;
  // Index of a tensor of this layout (a reference from tensors() or tensor()).
  int index_of(const TensorInfo& t) const { return static_cast<int>(&t - tensors_.data()); }
  // The tensor playing `role` in decoder layer `layer` (layer ignored for end tensors). With tied
  // embeddings kLmHead is the embedding (group 0). A role the model does not have (a bias of a
  // Llama) is an error; find_role returns null for it instead.
  const TensorInfo& tensor(TensorRole role, int layer = -1) const;
  const TensorInfo* find_role(TensorRole role, int layer) const;

  int64_t total_numel() const;
  // Parameters excluding the token embedding (torchtitan's MFU convention counts the head).
  int64_t non_embedding_numel() const;

 private:
  void add_adapters();
  void add(int group, const std::string& name, std::vector<int64_t> shape, TensorRole role,
           int layer, bool decay);
  ModelConfig config_;
  std::vector<TensorInfo> tensors_;
  std::vector<GroupInfo> groups_;
  // Per decoder layer, the index in tensors_ of each layer role (role − kInputNorm), −1 if absent.
  std::vector<std::array<int, kLayerRoles>> layer_roles_;
  // Per decoder layer and LoraTarget, the index of its A, B and DoRA magnitude tensors (-1 when
  // absent).
  std::vector<std::array<std::array<int, 3>, kLoraTargets>> lora_tensors_;
  std::vector<std::array<float, kLoraTargets>> lora_scales_;  // likewise, each adapter's scale
};

// The LoRA target (model/lora.h) a decoder layer's projection is, by its role: kQProj is
// LoraTarget::kQ, ..., kDownProj LoraTarget::kDown; -1 for every other role.
int lora_target_of(TensorRole role);

// [out, in] of the projection a LoRA target adapts; a fused target's out is its parts' rows
// together (qkv_proj: q_dim + 2·kv_dim), as its B is.
std::array<int64_t, 2> lora_projection_shape(const ModelConfig& c, LoraTarget t);
// The output rows each of a target's outputs takes from its B, in B's row order: q, k and v of
// qkv_proj, gate and up of gate_up_proj, the one projection's otherwise.
std::vector<int64_t> lora_output_rows(const ModelConfig& c, LoraTarget t);
// The projections a target adapts, in the order its B holds their rows: one, or a fused target's
// parts (Phi-3's qkv_proj: kQProj, kKProj, kVProj; gate_up_proj: kGateProj, kUpProj).
std::vector<TensorRole> lora_adapted_roles(LoraTarget t);

// The module of a model's checkpoint (and a PEFT adapter's target) that holds a decoder layer's
// projection (kQProj, ..., kDownProj), and its place among the module's parts: the projection
// itself (part 0), or in a fused module Phi-3's qkv_proj (q 0, k 1, v 2) and Phi-3's and GLM's
// gate_up_proj (gate 0, up 1). target = -1 for a role that is no projection.
struct ProjectionModule {
  int target = -1;  // a LoraTarget
  int part = 0;
};
ProjectionModule projection_module(TensorRole role, FusedModules fused);

// The adapter of a decoder layer's projection (kQProj, ..., kDownProj): its A and B tensors in the
// layout and the first of B's rows that the projection's output takes (k's are after q's in a
// fused qkv_proj adapter); a = b = -1 when the projection has none.
struct ProjectionLora {
  int a = -1, b = -1;
  int magnitude = -1;  // DoRA's: its rows from b_first_row are the projection's
  int64_t b_first_row = 0;
  int64_t rank = 0;
  float scale = 0;  // the adapter's own (ParamLayout::lora_scale)
};
ProjectionLora projection_lora(const ParamLayout& layout, TensorRole role, int layer);

// Useful training FLOPs per token of `config` at sequence length T, torchtitan's convention
// (docs/ARCHITECTURE.md §5): 6·Ψ_non-embedding + 12·L·H·head_dim·T; recomputation not counted.
// With tied embeddings the head's weight is the embedding, so its GEMMs are not counted either
// (as torchtitan counts a tied model): the MFU is then an underestimate. Every tensor trains here;
// a frozen or LoRA run's count is model/trainable.h's.
double training_flops_per_token(const ModelConfig& config, int64_t seq_len);

}  // namespace zt

// The tensors of a model as its Hugging Face checkpoint stores them. Most families store each
// tensor of the parameter layout (model/layout.h) under its own name; Phi-3 stores a layer's q, k
// and v projections as one self_attn.qkv_proj.weight and its gate and up projections as one
// mlp.gate_up_proj.weight (GLM the latter alone), each the parts' rows stacked in that order
// (transformers' Phi3Attention splits qkv_proj's output at q_dim and q_dim + kv_dim, Phi3MLP and
// GlmMLP chunk gate_up_proj's in halves, gate first). Import splits such a tensor into its parts;
// export joins them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/layout.h"

namespace zt {

struct HfCheckpointTensor {
  std::string name;            // as the checkpoint names it
  std::vector<int64_t> shape;  // as the checkpoint stores it
  // Indices into ParamLayout::tensors() of the parts, whose rows stack along dimension 0 in this
  // order; one part for a tensor stored as it is.
  std::vector<int> parts;
};

// The checkpoint's tensors in the layout's order (a fused tensor where its first part is).
std::vector<HfCheckpointTensor> hf_checkpoint_tensors(const ParamLayout& layout);

// Where a layout tensor lies in the checkpoint: the stored tensor and the element offset of its
// first element there.
struct HfCheckpointPlace {
  std::string name;
  int64_t element_offset = 0;
};
// One per layout tensor, indexed as ParamLayout::tensors().
std::vector<HfCheckpointPlace> hf_checkpoint_places(const ParamLayout& layout);
// The same by the layout tensor's name (for readers handed a TensorInfo of another layout object).
std::map<std::string, HfCheckpointPlace> hf_checkpoint_places_by_name(const ParamLayout& layout);

}  // namespace zt

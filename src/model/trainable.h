// Which parameters train: PyTorch's requires_grad, chosen by regular expressions over the
// Hugging Face tensor names (`train --trainable REGEX`, `--freeze REGEX`; docs/ARCHITECTURE.md §4).
// A tensor trains when it matches some --trainable pattern (every tensor does when there is none)
// and no --freeze pattern. With LoRA (model/lora.h) the adapters train and the base is frozen
// except the end tensors --trainable names (PEFT's modules_to_save, e.g. lm_head). Patterns are RE2
// regular expressions (Python re syntax without backreferences or lookaround, matched in linear
// time) searched anywhere in the name, as Python's re.search: "lm_head" matches lm_head.weight,
// "^model\.norm\." only the final norm.
//
// The model skips a frozen tensor's weight gradient (its dW product); the engine keeps state per
// parameter group (the embedding, each decoder layer, the head): a group with no trainable tensor
// has no gradient, no fp32 master and no Adam moments, and no backward runs below the lowest group
// that trains.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/layout.h"

namespace zt {

enum class GroupTraining { kAll, kSome, kNone };

class TrainableSet {
 public:
  TrainableSet() = default;  // every tensor trains
  // Throws naming the pattern (and its option) that is not a valid regular expression or that
  // matches no tensor of `layout`, and when no tensor is left to train.
  static TrainableSet from_patterns(const ParamLayout& layout,
                                    const std::vector<std::string>& trainable,
                                    const std::vector<std::string>& freeze);

  // Whether every tensor trains (no freezing at all).
  bool all_train() const { return frozen_.empty(); }
  bool trains(int tensor) const;
  GroupTraining group(const ParamLayout& layout, int g) const;
  bool group_trains(const ParamLayout& layout, int g) const {
    return group(layout, g) != GroupTraining::kNone;
  }
  // The lowest compute unit whose backward is needed (model/layout.h; without LoRA a unit is a
  // group): the lowest unit with a trainable tensor (with tied embeddings a trainable embedding
  // is unit 0; a layer's LoRA adapters are their layer's unit).
  int lowest_backward_group(const ParamLayout& layout) const;
  // Elements of the trainable tensors.
  int64_t trainable_numel(const ParamLayout& layout) const;
  // Elements of the groups that train (every tensor of a group with a trainable one): those that
  // carry gradients and optimizer state.
  int64_t state_numel(const ParamLayout& layout) const;
  // Names of the frozen tensors, in layout order.
  std::vector<std::string> frozen_names(const ParamLayout& layout) const;
  // The frozen flag of every tensor, in layout order (empty when every tensor trains).
  const std::vector<bool>& frozen_flags() const { return frozen_; }
  // Every tensor frozen: inference (eval), which keeps no gradient, master or Adam moments.
  static TrainableSet all_frozen(const ParamLayout& layout);
  // The same set over another layout of the same model (by name); throws on a missing name.
  static TrainableSet from_frozen_names(const ParamLayout& layout,
                                        const std::vector<std::string>& frozen);

 private:
  std::vector<bool> frozen_;  // per tensor; empty: none
};

// Training FLOPs per token of `config` at sequence length T when only `trainable` trains: what
// the engine runs, in training_flops_per_token's convention (model/layout.h), so that the MFU of
// a frozen or LoRA run counts the work it does. Every non-embedding tensor costs 2 per element
// forward; from the lowest unit that trains up (lowest_backward_group: nothing below runs a
// backward), 2 more for the input gradient and, if it trains, 2 for its own gradient; attention
// costs 4·H·head_dim·T per layer forward and 8 more in a layer that runs its backward; a DoRA
// adapter costs its projection's 2·out·in again forward and 4·out·in backward. With every tensor
// trainable this is training_flops_per_token(config, T) exactly.
double training_flops_per_token(const ModelConfig& config, int64_t seq_len,
                                const TrainableSet& trainable);

}  // namespace zt

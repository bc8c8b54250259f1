// Incremental decoding with a key/value cache (what `zerotrain generate` runs): the Llama forward
// of model/llama.h over new tokens only, each layer's rotated keys and values of earlier positions
// kept, so that a prompt of P tokens followed by N new ones costs one forward of P rows and N of
// one row, not N forwards of the whole window. The ops are the model's own (backend.h), with
// rope_forward_after and attention_forward_after for rows that follow cached ones; fp32 only.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/layout.h"
#include "util/memory.h"
#include "util/tensor_view.h"

namespace zt {

class KvCacheDecoder {
 public:
  // Caches up to max_positions positions (≤ the model's max_positions(); a layer with a sliding
  // window attends over the last ones of them) and runs up to max_rows tokens per forward (the
  // prompt's length: each new token after it is one).
  KvCacheDecoder(const ModelConfig& config, Backend& backend, MemoryTracker& memory,
                 int64_t max_positions, int64_t max_rows);

  const ParamLayout& layout() const { return layout_; }
  int64_t length() const { return length_; }  // positions cached

  // Runs tokens[0..n) at positions length()..length()+n−1 through the model, caches their keys
  // and values, and returns the logits of the last one [V]. params[g]: group g's fp32 weights in
  // the layout's order (the head of a tied model reads the embedding group's table).
  // Longrope: a forward that takes the cache past original_max_position_embeddings runs every
  // position again with the long factors, as transformers' Phi-3 generation drops its cache there.
  std::vector<float> forward(const int32_t* tokens, int64_t n,
                             const std::vector<ConstTensorView>& params);

 private:
  void layer_forward(int layer, ConstTensorView params, TensorView x, TensorView out, int64_t n);

  ModelConfig config_;
  ParamLayout layout_;
  Backend& be_;
  int64_t max_positions_, max_rows_;
  int64_t length_ = 0;
  std::vector<int32_t> history_;  // the tokens cached (longrope: run again past its original)
  // Per layer [max_positions, Hkv, hd]: keys after RoPE (and the q/k norm), values.
  std::vector<TrackedBuffer<float>> keys_, values_;
  // The new rows' activations, up to max_rows rows: two residual buffers used in turn, then
  // one layer's tensors (shared by every layer), the head's row and the token ids.
  TrackedBuffer<float> resid_[2], xn_, q_, q_raw_, k_raw_, att_, x2_, gate_, up_, h_;
  TrackedBuffer<float> attn_out_, mlp_out_;  // Gemma 2 only
  TrackedBuffer<float> rstd_, rstd_heads_, lse_, head_in_, logits_;
  TrackedBuffer<int32_t> tokens_;
};

}  // namespace zt

// The Llama model's head (model/llama.h): the final norm, the LM head's linear and the
// cross-entropy, a chunk of rows at a time, with the training path's fused backward; and the
// per-token losses and logits it leaves.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "model/llama.h"
#include "util/error.h"

namespace zt {

// ---- head: xf = rms(x_L)·gF; logits = xf·Whᵀ; loss = CE(logits, targets) ----
// Rows go in chunks of head_chunk_ (t_.logits holds one chunk), never all [B·T, V] at once.
// Evaluation (the forward alone), per chunk of rows R:
//   logits_R = xf_R·Whᵀ;  loss_R = CE(logits_R)
// Training fuses the linear and the cross-entropy with their backward (no logits kept, none
// computed twice): the forward stops at xf, and the head's backward, which the engine runs right
// after, takes each chunk once, through
//   logits_R = xf_R·Whᵀ;  loss_R, dlogits_R = CE(logits_R) (in place)
//   dxf_R = dlogits_R·Wh;  dWh += dlogits_Rᵀ·xf_R
// so a training micro-batch's losses exist only after the head's backward (head_pending_).
// Tied embeddings: Wh is the embedding table E, and dE collects dWh here and the embedding
// backward's scatter-add later (one parameter, one gradient). Gemma 2's final_logit_softcapping c:
// logits_R ← c·tanh(logits_R/c) before the cross-entropy, which then also multiplies dlogits_R by
// 1 − (logits_R/c)² (backend.h). Granite's logits_scaling s: logits_R ← logits_R·(1/s) (1/s in
// fp32: transformers divides by s, the same for the published powers of two), dlogits_R ·= 1/s.
void LlamaModel::head_logits(ConstTensorView head, int64_t r0, int64_t rows) {
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  be_.matmul_forward(t_.logits, t_.final_norm_out.at(r0 * D), head, rows, V, D);
  if (config_.logits_scaling != 1.0)
    be_.scale_inplace(t_.logits, config_.logits_factor(), rows * V);
  if (config_.final_logit_softcap > 0.0f)
    be_.softcap_inplace(t_.logits, config_.final_logit_softcap, rows * V);
}

ConstTensorView head_weight(const ParamLayout& layout, ConstTensorView head_group,
                            ConstTensorView embedding) {
  if (!layout.tied_embeddings()) return head_group.at(layout.tensor(TensorRole::kLmHead).offset);
  ZT_CHECK(static_cast<bool>(embedding),
           "tied embeddings: the head needs the embedding group's parameters");
  return embedding.at(layout.tensor(TensorRole::kEmbedding).offset);
}

void LlamaModel::head_forward(ConstTensorView params, ConstTensorView embedding, bool training,
                              float grad_scale) {
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  const ConstTensorView norm = params.at(layout_.tensor(TensorRole::kFinalNorm).offset);
  const ConstTensorView head = head_weight(layout_, params, embedding);
  be_.rmsnorm_forward(t_.final_norm_out, t_.final_rstd, t_.resid.back(), norm, M_, D,
                      static_cast<float>(config_.rms_norm_eps), config_.norm_weight_offset);
  if (training) set_loss_gradient_scale(grad_scale);
  head_pending_ = training;
  head_evaluated_ = !training;
  if (training) return;  // the chunks run in head_backward, once
  for (int64_t r0 = 0; r0 < M_; r0 += head_chunk_) {
    const int64_t rows = std::min(head_chunk_, M_ - r0);
    head_logits(head, r0, rows);
    be_.cross_entropy(t_.losses + r0, TensorView(), t_.logits, tokens_.data() + M_ + r0, rows, V,
                      grad_scale, config_.final_logit_softcap);
  }
}

void LlamaModel::head_backward(ConstTensorView params, float* grads, ConstTensorView embedding,
                               float* embedding_grads, GradWrite write) {
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  const TensorInfo& norm_t = layout_.tensor(TensorRole::kFinalNorm);
  const TensorInfo& head_t = layout_.tensor(TensorRole::kLmHead);
  const ConstTensorView head = head_weight(layout_, params, embedding);
  const bool head_trains = trainable_.trains(layout_.index_of(head_t));
  ZT_CHECK(!layout_.tied_embeddings() || !head_trains || embedding_grads != nullptr,
           "tied embeddings: the head's backward needs the embedding group's gradients");
  // Tied: dWh is the embedding's gradient, which its own backward adds to later. Null when the
  // head's weight is frozen: the product is skipped.
  float* head_grads = !head_trains                ? nullptr
                      : layout_.tied_embeddings() ? embedding_grads + head_t.offset
                                                  : grads + head_t.offset;
  ZT_CHECK(head_pending_,
           "LlamaModel: the head's backward needs a training forward of the head first");
  // The chunks add up their products; kAssign's first one overwrites (tied: always added).
  const GradWrite first_chunk_write = layout_.tied_embeddings() ? GradWrite::kAdd : write;
  for (int64_t r0 = 0; r0 < M_; r0 += head_chunk_) {
    const int64_t rows = std::min(head_chunk_, M_ - r0);
    head_logits(head, r0, rows);
    // Granite's logits/s: dlogits_raw = dlogits/s, folded into the cross-entropy's factor,
    // logits_factor · grad_scale, the latter read from device memory (set_loss_gradient_scale).
    be_.cross_entropy(t_.losses + r0, t_.logits, t_.logits, tokens_.data() + M_ + r0, rows, V,
                      config_.logits_factor(), config_.final_logit_softcap, loss_gradient_scale());
    be_.matmul_backward(t_.dxn.at(r0 * D), head_grads, t_.logits, t_.final_norm_out.at(r0 * D),
                        head, rows, V, D, false, r0 == 0 ? first_chunk_write : GradWrite::kAdd);
  }
  head_pending_ = false;
  be_.zero(t_.dresid, M_ * D);
  float* norm_grads = trainable_.trains(layout_.index_of(norm_t)) ? grads + norm_t.offset : nullptr;
  be_.rmsnorm_backward(t_.dresid, norm_grads, t_.dxn, t_.resid.back(), params.at(norm_t.offset),
                       t_.final_rstd, M_, D, config_.norm_weight_offset, write);
}

void LlamaModel::set_loss_gradient_scale(float grad_scale) {
  uint32_t bits = 0;
  std::memcpy(&bits, &grad_scale, sizeof(bits));
  if (scale_uploaded_ && bits == uploaded_scale_bits_) return;
  be_.device_memory().to_device(tokens_.data() + 4 * M_, &grad_scale, sizeof(grad_scale));
  uploaded_scale_bits_ = bits;
  scale_uploaded_ = true;
}

double sum_token_losses(const float* losses, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += losses[i];
  return s;
}

void LlamaModel::check_losses_written() const {
  ZT_CHECK(!head_pending_,
           "LlamaModel: a training micro-batch's losses exist after the head's backward");
}

const float* LlamaModel::token_losses() const {
  check_losses_written();
  return t_.losses;
}

double LlamaModel::loss_sum() const {
  check_losses_written();
  std::vector<float> losses(static_cast<size_t>(M_));
  be_.device_memory().to_host(losses.data(), t_.losses, losses.size() * sizeof(float));
  return sum_token_losses(losses.data(), M_);
}

std::vector<float> LlamaModel::logits() const {
  ZT_CHECK(head_evaluated_, "LlamaModel::logits(): only an evaluation forward keeps the logits");
  ZT_CHECK(head_chunks() == 1, "LlamaModel::logits(): the head runs in " +
                                   std::to_string(head_chunks()) +
                                   " chunks; only one chunk keeps every logit");
  return widened_to_host(be_.device_memory(), t_.logits, M_ * config_.vocab_size);
}

}  // namespace zt

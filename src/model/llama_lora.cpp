// LoRA on the decoder layers' projections (model/lora.h), forward and backward side by side.
//   forward   u = s·(d(x)·Aᵀ)  [M, r] (kept);  y += u·Bᵀ
//   backward  dB += dyᵀ·u;  du = s·(dy·B);  dA += duᵀ·d(x);  dx += d'(du·A)
// A fused projection (Phi-3's qkv_proj: y = [q | k | v]) has outputs y_i, each taking its rows
// B_i of B: y_i += u·B_iᵀ, dB_i += dy_iᵀ·u, du = s·Σ_i dy_i·B_i; one A, one u, one dropout mask.
// d is the identity, or with dropout p while training d(x) = x·mask/(1−p), its mask a hash of
// (seed, layer, projection, global token, column) (backend/dropout_hash.h) that the backward
// draws again instead of keeping d(x); d' applies the same mask and scale to the gradient.
// PEFT computes y + (x·Aᵀ·Bᵀ)·s; scaling the rank-r product first is the same sum with the scale
// applied on M·r values instead of M·out (equal up to fp32 rounding). The base weight's products
// are the layer's own (llama.cpp); its gradient is never formed (the base is frozen).
#include <vector>

#include "backend/dropout_hash.h"
#include "model/llama.h"
#include "util/error.h"

namespace zt {

ConstTensorView LlamaModel::lora_input(int layer, LoraTarget target, ConstTensorView x,
                                       int64_t in) {
  const double p = config_.lora.dropout;
  if (!training_ || p == 0) return x;
  be_.dropout_forward(t_.lora_dropped, x, M_, in, static_cast<float>(p),
                      dropout_stream(dropout_seed_, layer, static_cast<int>(target)), first_token_);
  return t_.lora_dropped;
}

void LlamaModel::lora_forward(int layer, LoraTarget target, std::initializer_list<TensorView> ys,
                              ConstTensorView x, ConstTensorView adapters) {
  const int a = layout_.lora_tensor(layer, static_cast<int>(target), false);
  if (a < 0) return;
  ZT_CHECK(static_cast<bool>(adapters),
           "layer " + std::to_string(layer) + ": LoRA needs the adapter group's parameters");
  const int b = layout_.lora_tensor(layer, static_cast<int>(target), true);
  const int64_t in = layout_.tensors()[static_cast<size_t>(a)].shape[1];  // A: [r, in]
  const std::vector<int64_t> rows = lora_output_rows(config_, target);
  ZT_CHECK(ys.size() == rows.size(), std::string("LoRA on ") + lora_target_name(target) +
                                         ": the layer passed another number of outputs");
  const int64_t r = layout_.tensors()[static_cast<size_t>(a)].shape[0];  // this adapter's rank
  const TensorView u = acts_for(layer).lora[static_cast<size_t>(target)];
  be_.matmul_forward(u, lora_input(layer, target, x, in),
                     adapters.at(layout_.tensors()[static_cast<size_t>(a)].offset), M_, r, in);
  be_.scale_inplace(u, layout_.lora_scale(layer, static_cast<int>(target)), M_ * r);
  // Each output takes its rows of B (all of them but for a fused projection's parts).
  int64_t b_row = 0;
  auto row_count = rows.begin();
  for (const TensorView& y : ys) {
    const int64_t out = *row_count++;
    be_.matmul_forward(t_.lora_product, u,
                       adapters.at(layout_.tensors()[static_cast<size_t>(b)].offset + b_row * r),
                       M_, out, r);
    be_.add_inplace(y, t_.lora_product, M_ * out);
    b_row += out;
  }
}

void LlamaModel::lora_backward(int layer, LoraTarget target, TensorView dx,
                               std::initializer_list<ConstTensorView> dys, ConstTensorView x,
                               ConstTensorView adapters, float* adapter_grads, GradWrite write) {
  const int a = layout_.lora_tensor(layer, static_cast<int>(target), false);
  if (a < 0) return;
  const int b = layout_.lora_tensor(layer, static_cast<int>(target), true);
  const TensorInfo& ta = layout_.tensors()[static_cast<size_t>(a)];
  const TensorInfo& tb = layout_.tensors()[static_cast<size_t>(b)];
  auto grad = [&](const TensorInfo& t) -> float* {
    return adapter_grads && trainable_.trains(layout_.index_of(t)) ? adapter_grads + t.offset
                                                                   : nullptr;
  };
  const int64_t in = ta.shape[1], r = ta.shape[0];  // A: [r, in]
  const std::vector<int64_t> rows = lora_output_rows(config_, target);
  ZT_CHECK(dys.size() == rows.size(), std::string("LoRA on ") + lora_target_name(target) +
                                          ": the layer passed another number of gradients");
  const ConstTensorView u = acts_for(layer).lora[static_cast<size_t>(target)];
  // du = Σ dy_i·B_i over the outputs (their rows B_i of B), dB_i = dy_iᵀ·u (disjoint rows).
  int64_t b_row = 0;
  auto row_count = rows.begin();
  for (const ConstTensorView& dy : dys) {
    const int64_t out = *row_count++;
    float* const db = grad(tb);
    be_.matmul_backward(t_.lora_du, db ? db + b_row * r : nullptr, dy, u,
                        adapters.at(tb.offset + b_row * r), M_, out, r, b_row > 0, write);
    b_row += out;
  }
  be_.scale_inplace(t_.lora_du, layout_.lora_scale(layer, static_cast<int>(target)), M_ * r);
  const ConstTensorView xd = lora_input(layer, target, x, in);
  if (xd.data == x.data) {  // no dropout: dx += du·A and dA += duᵀ·x in one call
    be_.matmul_backward(dx, grad(ta), t_.lora_du, x, adapters.at(ta.offset), M_, r, in, true,
                        write);
    return;
  }
  be_.matmul_backward(TensorView(), grad(ta), t_.lora_du, xd, adapters.at(ta.offset), M_, r, in,
                      false, write);
  // dx += mask·(du·A)/(1−p), through the dropped input's buffer (d(x) is no longer needed).
  be_.matmul_backward(t_.lora_dropped, nullptr, t_.lora_du, xd, adapters.at(ta.offset), M_, r, in,
                      false, GradWrite::kAdd);
  be_.dropout_forward(t_.lora_dropped, t_.lora_dropped, M_, in,
                      static_cast<float>(config_.lora.dropout),
                      dropout_stream(dropout_seed_, layer, static_cast<int>(target)), first_token_);
  be_.add_inplace(dx, t_.lora_dropped, M_ * in);
}

}  // namespace zt

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
//
// DoRA (use_dora; PEFT's DoraLinearLayer) rescales each output row o by g_o = m_o/n_o, m the
// trained magnitude, n_o = ‖W_o + s·(B·A)_o‖ the row's norm, treated as a constant (detached, as
// the DoRA paper's §4.3 and PEFT do). With P = d(x)·Wᵀ and Q = u·Bᵀ:
//   forward   y += (g − 1)⊙P + g⊙Q          (no dropout: y = g⊙(x·Wᵀ + Q), bias and residual kept)
//   backward  dm += Σ_t dy⊙(P + Q) / n;  dQ = g⊙dy (the LoRA backward above on it);
//             d(d(x)) += ((g − 1)⊙dy)·W
// P is formed again in the backward and n computed again (from the same W, A, B: the same bits),
// so nothing but u is kept.
#include <vector>

#include "backend/dropout_hash.h"
#include "model/decoder_layer.h"
#include "model/llama.h"
#include "util/error.h"

namespace zt {

namespace {

// The base weight of a decoder layer's projection.
ConstTensorView projection_weight(const LayerWeights& P, TensorRole role) {
  switch (role) {
    case TensorRole::kQProj:
      return P.wq;
    case TensorRole::kKProj:
      return P.wk;
    case TensorRole::kVProj:
      return P.wv;
    case TensorRole::kOProj:
      return P.wo;
    case TensorRole::kGateProj:
      return P.wgate;
    case TensorRole::kUpProj:
      return P.wup;
    case TensorRole::kDownProj:
      return P.wdown;
    default:
      throw Error("projection_weight: not a decoder layer's projection");
  }
}

}  // namespace

LlamaModel::AdapterTensors LlamaModel::adapter_tensors(int layer, LoraTarget target) const {
  const int target_index = static_cast<int>(target);
  const int a = layout_.lora_tensor(layer, target_index, false);
  AdapterTensors t;
  if (a < 0) return t;
  auto info = [&](int index) { return &layout_.tensors()[static_cast<size_t>(index)]; };
  t.a = info(a);
  t.b = info(layout_.lora_tensor(layer, target_index, true));
  const int magnitude = layout_.lora_magnitude(layer, target_index);
  t.magnitude = magnitude < 0 ? nullptr : info(magnitude);
  t.rank = t.a->shape[0];  // A: [r, in], r this adapter's own
  t.in = t.a->shape[1];
  t.scale = layout_.lora_scale(layer, target_index);
  return t;
}

ConstTensorView LlamaModel::lora_input(int layer, LoraTarget target, ConstTensorView x,
                                       int64_t in) {
  const double p = config_.lora.dropout;
  if (!training_ || p == 0) return x;
  be_.dropout_forward(t_.lora_dropped, x, M_, in, static_cast<float>(p),
                      dropout_stream(dropout_seed_, layer, static_cast<int>(target)), first_token_);
  return t_.lora_dropped;
}

void LlamaModel::lora_forward(int layer, LoraTarget target, std::initializer_list<TensorView> ys,
                              ConstTensorView x, ConstTensorView adapters, const LayerWeights& P) {
  const AdapterTensors t = adapter_tensors(layer, target);
  if (!t.a) return;
  ZT_CHECK(static_cast<bool>(adapters),
           "layer " + std::to_string(layer) + ": LoRA needs the adapter group's parameters");
  const std::vector<int64_t> rows = lora_output_rows(config_, target);
  const std::vector<TensorRole> roles = lora_adapted_roles(target);
  ZT_CHECK(ys.size() == rows.size(), std::string("LoRA on ") + lora_target_name(target) +
                                         ": the layer passed another number of outputs");
  const TensorView u = acts_for(layer).lora[static_cast<size_t>(target)];
  const ConstTensorView xd = lora_input(layer, target, x, t.in);
  be_.matmul_forward(u, xd, adapters.at(t.a->offset), M_, t.rank, t.in);
  be_.scale_inplace(u, t.scale, M_ * t.rank);
  // Each output takes its rows of B (all of them but for a fused projection's parts).
  int64_t b_row = 0;
  size_t part = 0;
  for (const TensorView& y : ys) {
    const int64_t out = rows[part];
    be_.matmul_forward(t_.lora_product, u, adapters.at(t.b->offset + b_row * t.rank), M_, out,
                       t.rank);
    if (!t.magnitude) {
      be_.add_inplace(y, t_.lora_product, M_ * out);
    } else {  // DoRA: y += (g − 1)⊙(d(x)·Wᵀ) + g⊙Q, g = m/n of these rows
      const ConstTensorView w = projection_weight(P, roles[part]);
      const ConstTensorView m = adapters.at(t.magnitude->offset + b_row);
      float* const norms = dora_row_norms(t, adapters, w, b_row, out);
      be_.matmul_forward(t_.dora_base, xd, w, M_, out, t.in);
      be_.dora_scale_columns(y, t_.dora_base, m, norms, -1.0f, M_, out, true);
      be_.dora_scale_columns(y, t_.lora_product, m, norms, 0.0f, M_, out, true);
    }
    b_row += out;
    ++part;
  }
}

float* LlamaModel::dora_row_norms(const AdapterTensors& t, ConstTensorView adapters,
                                  ConstTensorView w, int64_t b_row, int64_t out) {
  float* const norms = t_.dora_norms + b_row;
  // Rounded to the magnitude's type, in which it starts at the base rows' norms (the view may be
  // a 16-bit parameter widened to fp32).
  const DType magnitude_type = adapters.dtype != DType::kFloat32 ? adapters.dtype : parameter_type_;
  be_.dora_weight_norms(norms, w, adapters.at(t.b->offset + b_row * t.rank),
                        adapters.at(t.a->offset), t.scale, out, t.rank, t.in, magnitude_type);
  return norms;
}

ConstTensorView LlamaModel::dora_output_backward(const AdapterTensors& t, ConstTensorView dy,
                                                 ConstTensorView xd, ConstTensorView adapters,
                                                 ConstTensorView w, int64_t b_row, int64_t out,
                                                 float* dm) {
  const float* norms = dora_row_norms(t, adapters, w, b_row, out);
  const ConstTensorView m = adapters.at(t.magnitude->offset + b_row);
  // z = d(x)·Wᵀ + u·Bᵀ into t_.lora_product, u·Bᵀ passing through this output's slot of
  // t_.dora_base, which then keeps (g − 1)⊙dy for dora_base_backward.
  const TensorView kept = t_.dora_base.at(M_ * b_row);
  be_.matmul_forward(t_.lora_product, xd, w, M_, out, t.in);
  be_.matmul_forward(kept, acts_for(t.a->layer).lora[static_cast<size_t>(t.a->lora_target)],
                     adapters.at(t.b->offset + b_row * t.rank), M_, out, t.rank);
  be_.add_inplace(t_.lora_product, kept, M_ * out);
  if (dm) be_.dora_magnitude_grad(dm + b_row, dy, t_.lora_product, norms, M_, out);
  be_.dora_scale_columns(t_.lora_product, dy, m, norms, 0.0f, M_, out, false);
  be_.dora_scale_columns(kept, dy, m, norms, -1.0f, M_, out, false);
  return t_.lora_product;
}

void LlamaModel::dora_base_backward(TensorView dxd, ConstTensorView x, LoraTarget target,
                                    const LayerWeights& P, int64_t in) {
  const std::vector<int64_t> rows = lora_output_rows(config_, target);
  const std::vector<TensorRole> roles = lora_adapted_roles(target);
  int64_t b_row = 0;
  for (size_t part = 0; part < rows.size(); ++part) {
    be_.matmul_backward(dxd, nullptr, t_.dora_base.at(M_ * b_row), x,
                        projection_weight(P, roles[part]), M_, rows[part], in, true,
                        GradWrite::kAdd);
    b_row += rows[part];
  }
}

void LlamaModel::lora_backward(int layer, LoraTarget target, TensorView dx,
                               std::initializer_list<ConstTensorView> dys, ConstTensorView x,
                               ConstTensorView adapters, float* adapter_grads, GradWrite write,
                               const LayerWeights& P) {
  const AdapterTensors t = adapter_tensors(layer, target);
  if (!t.a) return;
  auto grad = [&](const TensorInfo* info) -> float* {
    return info && adapter_grads && trainable_.trains(layout_.index_of(*info))
               ? adapter_grads + info->offset
               : nullptr;
  };
  const int64_t in = t.in, r = t.rank;
  const std::vector<int64_t> rows = lora_output_rows(config_, target);
  const std::vector<TensorRole> roles = lora_adapted_roles(target);
  ZT_CHECK(dys.size() == rows.size(), std::string("LoRA on ") + lora_target_name(target) +
                                          ": the layer passed another number of gradients");
  const ConstTensorView u = acts_for(layer).lora[static_cast<size_t>(target)];
  const ConstTensorView xd = lora_input(layer, target, x, in);
  const ConstTensorView a = adapters.at(t.a->offset);
  // du = Σ dy_i·B_i over the outputs (their rows B_i of B), dB_i = dy_iᵀ·u (disjoint rows); with
  // DoRA dy_i is g⊙dy_i there.
  int64_t b_row = 0;
  size_t part = 0;
  for (const ConstTensorView& dy : dys) {
    const int64_t out = rows[part];
    float* const db = grad(t.b);
    const ConstTensorView dq =
        t.magnitude ? dora_output_backward(t, dy, xd, adapters, projection_weight(P, roles[part]),
                                           b_row, out, grad(t.magnitude))
                    : dy;
    be_.matmul_backward(t_.lora_du, db ? db + b_row * r : nullptr, dq, u,
                        adapters.at(t.b->offset + b_row * r), M_, out, r, b_row > 0, write);
    b_row += out;
    ++part;
  }
  be_.scale_inplace(t_.lora_du, t.scale, M_ * r);
  if (xd.data == x.data) {  // no dropout: dx += du·A and dA += duᵀ·x in one call
    be_.matmul_backward(dx, grad(t.a), t_.lora_du, x, a, M_, r, in, true, write);
    if (t.magnitude) dora_base_backward(dx, x, target, P, in);
    return;
  }
  be_.matmul_backward(TensorView(), grad(t.a), t_.lora_du, xd, a, M_, r, in, false, write);
  // dx += mask·(du·A [+ DoRA's base term])/(1−p), through the dropped input's buffer (d(x) is no
  // longer needed).
  be_.matmul_backward(t_.lora_dropped, nullptr, t_.lora_du, xd, a, M_, r, in, false,
                      GradWrite::kAdd);
  if (t.magnitude) dora_base_backward(t_.lora_dropped, x, target, P, in);
  be_.dropout_forward(t_.lora_dropped, t_.lora_dropped, M_, in,
                      static_cast<float>(config_.lora.dropout),
                      dropout_stream(dropout_seed_, layer, static_cast<int>(target)), first_token_);
  be_.add_inplace(dx, t_.lora_dropped, M_ * in);
}

}  // namespace zt

#include "model/decoder_layer.h"

namespace zt {

LayerWeights layer_weights(const ParamLayout& layout, int layer, ConstTensorView group) {
  auto at = [&](TensorRole r) {
    const TensorInfo* t = layout.find_role(r, layer);
    return t ? group.at(t->offset) : ConstTensorView();
  };
  return {at(TensorRole::kInputNorm),   at(TensorRole::kQProj),     at(TensorRole::kKProj),
          at(TensorRole::kVProj),       at(TensorRole::kOProj),     at(TensorRole::kPostAttnNorm),
          at(TensorRole::kGateProj),    at(TensorRole::kUpProj),    at(TensorRole::kDownProj),
          at(TensorRole::kQBias),       at(TensorRole::kKBias),     at(TensorRole::kVBias),
          at(TensorRole::kOBias),       at(TensorRole::kQNorm),     at(TensorRole::kKNorm),
          at(TensorRole::kAttnOutNorm), at(TensorRole::kMlpOutNorm)};
}

void decoder_layer_qkv(Backend& be, const ModelConfig& config, const LayerWeights& P,
                       const LayerActivations& A, ConstTensorView x, int64_t rows,
                       const ProjectionAdapter& adapt) {
  const int64_t D = config.hidden_size, KV = config.kv_dim(), QD = config.q_dim();
  const int64_t H = config.num_heads, Hkv = config.num_kv_heads;
  const float eps = static_cast<float>(config.rms_norm_eps);
  const float offset = config.norm_weight_offset;
  if (config.pre_norms) be.rmsnorm_forward(A.xn1, A.rstd1, x, P.input_norm, rows, D, eps, offset);
  const ConstTensorView in = attention_input(config, A, x);
  const bool qk_norm = config.qk_norm;
  const TensorView q_out = qk_norm ? A.q_raw : A.q, k_out = qk_norm ? A.k_raw : A.k;
  // The projections of one input go as one batch of equal shapes (backend.h): k and v always,
  // q too when it is as wide (no grouped-query heads). Biases follow, each y += b.
  const TensorView qkv[] = {q_out, k_out, A.v};
  const ConstTensorView qkv_weights[] = {P.wq, P.wk, P.wv};
  const int first = QD == KV ? 0 : 1;  // the first projection of the batch
  if (first == 1) be.matmul_forward(q_out, in, P.wq, rows, QD, D);
  be.matmul_forward_batch(qkv + first, in, qkv_weights + first, 3 - first, rows, KV, D);
  if (P.bq) be.bias_forward(q_out, P.bq, rows, QD);
  if (P.bk) be.bias_forward(k_out, P.bk, rows, KV);
  if (P.bv) be.bias_forward(A.v, P.bv, rows, KV);
  if (adapt) {
    adapt(LoraTarget::kQ, {q_out}, in);
    adapt(LoraTarget::kK, {k_out}, in);
    adapt(LoraTarget::kV, {A.v}, in);
    adapt(LoraTarget::kQkv, {q_out, k_out, A.v}, in);
  }
  if (qk_norm) {  // rows of each head's hd values, or of a token's whole projection (OLMo 2)
    const QkNormRows q = qk_norm_rows(config, H), k = qk_norm_rows(config, Hkv);
    be.rmsnorm_forward(A.q, A.rstd_q, A.q_raw, P.q_norm, rows * q.per_token, q.width, eps, offset);
    be.rmsnorm_forward(A.k, A.rstd_k, A.k_raw, P.k_norm, rows * k.per_token, k.width, eps, offset);
  }
}

namespace {

// The projection whose output joins the residual stream (o_proj, down_proj), its bias, the norm
// on its output with where it keeps the output and the norm's statistics (Gemma 2, OLMo 2; null
// otherwise), and its adapter.
struct BranchWeights {
  ConstTensorView weight, bias, norm;
  TensorView kept;
  float* rstd = nullptr;
  LoraTarget target;
};

// y = in·Wᵀ (+ b) (+ its adapter's product) joins the residual stream: out = residual + y, the add
// in the GEMM, rounded once (plain_residual_add); out = residual + rms(y)·g, y kept (Gemma 2's and
// OLMo 2's norms on the outputs); or out = residual + m·y (Granite's residual_multiplier).
void branch_to_residual(Backend& be, const ModelConfig& config, const BranchWeights& b,
                        ConstTensorView in, int64_t K, ConstTensorView residual, TensorView out,
                        int64_t rows, const ProjectionAdapter& adapt) {
  const int64_t D = config.hidden_size;
  const bool plain = config.plain_residual_add();
  const TensorView y = config.sandwich_norms ? b.kept : out;
  if (plain)
    be.matmul_forward_add(y, in, b.weight, residual, rows, D, K);
  else
    be.matmul_forward(y, in, b.weight, rows, D, K);
  if (b.bias) be.bias_forward(y, b.bias, rows, D);
  if (adapt) adapt(b.target, {y}, in);
  if (plain) return;
  if (config.sandwich_norms)
    be.rmsnorm_forward(out, b.rstd, y, b.norm, rows, D, static_cast<float>(config.rms_norm_eps),
                       config.norm_weight_offset);
  else
    be.scale_inplace(out, static_cast<float>(config.residual_multiplier), rows * D);
  be.add_inplace(out, residual, rows * D);
}

}  // namespace

void decoder_layer_mlp(Backend& be, const ModelConfig& config, const LayerWeights& P,
                       const LayerActivations& A, ConstTensorView x, TensorView out, int64_t rows,
                       const ProjectionAdapter& adapt) {
  const int64_t D = config.hidden_size, F = config.intermediate_size, QD = config.q_dim();
  const float eps = static_cast<float>(config.rms_norm_eps), offset = config.norm_weight_offset;
  // x2 = x + att·Woᵀ (+ bo), or Gemma 2's and OLMo 2's x + rms(att·Woᵀ), or Granite's x + m·(...)
  branch_to_residual(be, config,
                     {P.wo, P.bo, P.attn_out_norm, A.attn_out, A.rstd_attn_out, LoraTarget::kO},
                     A.att, QD, x, A.x2, rows, adapt);
  if (config.pre_norms) be.rmsnorm_forward(A.xn2, A.rstd2, A.x2, P.post_norm, rows, D, eps, offset);
  const ConstTensorView in = mlp_input(config, A);
  const TensorView gate_up[] = {A.gate, A.up};
  const ConstTensorView gate_up_weights[] = {P.wgate, P.wup};
  be.matmul_forward_batch(gate_up, in, gate_up_weights, 2, rows, F, D);
  if (adapt) {
    adapt(LoraTarget::kGate, {A.gate}, in);
    adapt(LoraTarget::kUp, {A.up}, in);
    adapt(LoraTarget::kGateUp, {A.gate, A.up}, in);
  }
  be.glu_forward(A.h, A.gate, A.up, rows * F, config.mlp_activation);
  // out = x2 + h·Wdᵀ, or x2 + rms(h·Wdᵀ), or x2 + m·h·Wdᵀ
  branch_to_residual(
      be, config, {P.wdown, nullptr, P.mlp_out_norm, A.mlp_out, A.rstd_mlp_out, LoraTarget::kDown},
      A.h, F, A.x2, out, rows, adapt);
}

}  // namespace zt

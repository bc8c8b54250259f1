#include "model/llama.h"

#include <algorithm>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/ignored_target.h"

namespace zt {

int64_t head_rows_per_chunk(int64_t rows, int64_t vocab) {
  ZT_CHECK(rows > 0 && vocab > 0, "head_rows_per_chunk: rows and vocab must be positive");
  const int64_t elements =
      std::clamp(kHeadChunkTargetRows * vocab, kHeadChunkMinElements, kHeadChunkMaxElements);
  const int64_t budget = elements / vocab / kHeadChunkRowMultiple * kHeadChunkRowMultiple;
  return std::min(rows, std::max(kHeadChunkRowMultiple, budget));
}

LlamaModel::LlamaModel(const ModelConfig& config, Backend& backend, MemoryTracker& memory,
                       int64_t micro_batch, int64_t seq_len, ActivationCheckpointing ac,
                       int64_t head_chunk_rows, DType storage)
    : config_(config),
      layout_(config),
      be_(backend),
      B_(micro_batch),
      T_(seq_len),
      M_(micro_batch * seq_len),
      ac_(ac),
      storage_(storage) {
  ZT_CHECK(B_ > 0 && T_ > 0, "micro-batch and sequence length must be positive");
  ZT_CHECK(head_chunk_rows >= 0, "head_chunk_rows must be >= 0");
  head_chunk_ = head_chunk_rows > 0 ? std::min(head_chunk_rows, M_)
                                    : head_rows_per_chunk(M_, config_.vocab_size);
  // Activations (and every device-pool buffer of the engine) live in the backend's memory.
  ZT_CHECK(&memory.device_memory() == &backend.device_memory(),
           "the memory tracker accounts another device memory than the " + backend.name() +
               " backend's");
  ZT_CHECK(T_ <= config_.max_positions(),
           "seq-len " + std::to_string(T_) + " exceeds " + config_.max_positions_text());
  const ActivationPlan plan = ActivationPlan::make(config_, B_, T_, ac_, head_chunk_, storage_);
  arena_ = TrackedBuffer<std::byte>(memory, MemCategory::kActivations,
                                    static_cast<size_t>(plan.device_bytes()));
  if (plan.host_residual > 0)
    host_arena_ = TrackedBuffer<std::byte>(memory, MemCategory::kHostOffload,
                                           static_cast<size_t>(plan.host_residual));
  tokens_ = TrackedBuffer<int32_t>(memory, MemCategory::kActivations,
                                   static_cast<size_t>(plan.token_bytes) / sizeof(int32_t));
  const ActivationPlan carved = carve_activation_arena(config_, B_, T_, ac_, head_chunk_, storage_,
                                                       arena_.data(), host_arena_.data(), t_);
  ZT_CHECK(
      carved.device_bytes() == plan.device_bytes() && carved.host_residual == plan.host_residual,
      "activation arena plan mismatch");
}

LlamaModel::LayerActs LlamaModel::acts_for(int layer) const {
  if (ac_.is_checkpointed(layer) || ac_.forward_only) return t_.scratch;
  LayerActs a = t_.layers[static_cast<size_t>(layer)];
  if (ac_.selective) {  // the norms' outputs and the SwiGLU product live in the shared scratch
    a.xn1 = t_.scratch.xn1;
    a.xn2 = t_.scratch.xn2;
    a.h = t_.scratch.h;
  }
  return a;
}

void LlamaModel::set_batch(const int32_t* inputs, const int32_t* targets,
                           const int32_t* doc_start) {
  auto check = [&](int32_t tok) {
    ZT_CHECK(tok >= 0 && tok < config_.vocab_size, "token " + std::to_string(tok) +
                                                       " is outside the vocabulary (vocab_size " +
                                                       std::to_string(config_.vocab_size) + ")");
  };
  for (int64_t i = 0; i < M_; ++i) {
    check(inputs[i]);
    if (targets[i] != kIgnoredTarget) check(targets[i]);
  }
  // Document masks: within a row each token's document starts at or before it, and the start
  // either stays or moves to the token itself (backend.h), as the attention kernels assume.
  for (int64_t i = 0; doc_start && i < M_; ++i) {
    const int64_t t = i % T_, start = doc_start[i];
    const bool stays = t > 0 && start == doc_start[i - 1];
    ZT_CHECK(start >= 0 && (stays || start == t),
             "document start " + std::to_string(start) + " of token " + std::to_string(t) +
                 " in row " + std::to_string(i / T_) + " is neither its predecessor's nor itself");
  }
  std::vector<int32_t> all(static_cast<size_t>(4 * M_), 0);
  std::copy(inputs, inputs + M_, all.begin());
  std::copy(targets, targets + M_, all.begin() + M_);
  if (doc_start) std::copy(doc_start, doc_start + M_, all.begin() + 2 * M_);
  // The ids whose rows the embedding's gradient adds to: the padding token's none
  // (ModelConfig::padding_token), as transformers' padding_idx.
  std::transform(inputs, inputs + M_, all.begin() + 3 * M_,
                 [&](int32_t tok) { return tok == config_.padding_token ? int32_t{-1} : tok; });
  be_.device_memory().to_device(tokens_.data(), all.data(), all.size() * sizeof(int32_t));
  be_.set_document_layout(doc_start, B_, T_);
  document_masks_ = doc_start != nullptr;
  // No logits of this batch yet: a recorded training pass replayed on it runs no host code, so
  // the flag is cleared here, where every micro-batch passes (engine/micro_batch_graphs.h).
  head_evaluated_ = false;
}

void LlamaModel::forward_group(int g, ConstTensorView params, bool training, float grad_scale,
                               ConstTensorView embedding, ConstTensorView adapters) {
  ZT_CHECK(!(training && ac_.forward_only),
           "forward_group: a training forward on a forward-only model (it keeps nothing for a "
           "backward)");
  training_ = training;
  if (g == layout_.embed_group()) {
    embed_forward(params);
  } else if (g == layout_.head_group()) {
    head_forward(params, embedding, training, grad_scale);
  } else {
    layer_forward(g - 1, params, false, adapters);
  }
}

void LlamaModel::backward_group(int g, ConstTensorView params, float* grads,
                                ConstTensorView embedding, float* embedding_grads,
                                ConstTensorView adapters, float* adapter_grads, GradWrite write) {
  ZT_CHECK(!ac_.forward_only, "backward_group: the model is forward-only (eval)");
  const bool layer = g != layout_.embed_group() && g != layout_.head_group();
  ZT_CHECK(layer || adapter_grads == nullptr, "backward_group: only a decoder layer has adapters");
  if (write == GradWrite::kAssign) {
    if (grads) zero_unassigned_grads(g, grads);
    if (adapter_grads) zero_unassigned_grads(layout_.adapter_group(g - 1), adapter_grads);
  }
  if (g == layout_.embed_group()) {
    embed_backward(grads);
  } else if (g == layout_.head_group()) {
    head_backward(params, grads, embedding, embedding_grads, write);
  } else {
    layer_backward(g - 1, params, grads, adapters, adapter_grads, write);
  }
}

// Whether one op of the backward writes all of t's gradient, so that kAssign can overwrite it: a
// weight-gradient GEMM for the projections (one product each per micro-batch), the untied head
// (its first chunk's product) and the LoRA adapters; the norm's backward (its column sums, one
// call per micro-batch) for each RMSNorm weight. The embedding's scatter and the biases' sums add
// into zeros instead.
static bool backward_writes_gradient(const TensorInfo& t) {
  switch (t.role) {
    case TensorRole::kInputNorm:
    case TensorRole::kPostAttnNorm:
    case TensorRole::kQNorm:
    case TensorRole::kKNorm:
    case TensorRole::kAttnOutNorm:
    case TensorRole::kMlpOutNorm:
    case TensorRole::kFinalNorm:
    case TensorRole::kQProj:
    case TensorRole::kKProj:
    case TensorRole::kVProj:
    case TensorRole::kOProj:
    case TensorRole::kGateProj:
    case TensorRole::kUpProj:
    case TensorRole::kDownProj:
    case TensorRole::kLmHead:
    case TensorRole::kLoraA:
    case TensorRole::kLoraB:
      return true;
    default:  // DoRA's magnitudes among them: their gradients are added (dora_magnitude_grad)
      return false;
  }
}

void LlamaModel::zero_unassigned_grads(int g, float* grads) {
  const GroupInfo& group = layout_.groups()[static_cast<size_t>(g)];
  int64_t begin = 0;  // the start of the run of elements no GEMM assigns
  auto zero_until = [&](int64_t end) {
    if (end > begin) be_.zero(grads + begin, end - begin);
  };
  for (int i : group.tensors) {  // in offset order
    const TensorInfo& t = layout_.tensors()[static_cast<size_t>(i)];
    if (!backward_writes_gradient(t) || !trainable_.trains(i)) continue;
    zero_until(t.offset);
    begin = t.offset + t.numel;
  }
  zero_until(group.numel);
}

// ---- embedding: x = table[tokens]·s;  dtable[tok] += dx·s (tok ≠ the padding token) ----
// s: Gemma's sqrt(hidden_size) in the activations' type, else 1 (no pass).
void LlamaModel::embed_forward(ConstTensorView params) {
  be_.embedding_forward(t_.resid[0], tokens_.data(), params, M_, config_.hidden_size);
  const float scale = config_.embedding_scale(t_.resid[0].dtype);
  if (scale != 1.0f) be_.scale_inplace(t_.resid[0], scale, M_ * config_.hidden_size);
}

void LlamaModel::embed_backward(float* grads) {
  if (!trainable_.trains(layout_.index_of(layout_.tensor(TensorRole::kEmbedding)))) return;
  const float scale = config_.embedding_scale(t_.resid[0].dtype);
  if (scale != 1.0f) be_.scale_inplace(t_.dresid, scale, M_ * config_.hidden_size);
  be_.embedding_backward(grads, t_.dresid, tokens_.data() + 3 * M_, M_, config_.hidden_size);
}

// ---- decoder layer ----
// xn1 = rms(x)·g1; q,k,v = xn1·W{q,k,v}ᵀ (+ b{q,k,v}); [Qwen3: q,k = rms_head(q,k)·g{q,k}];
// rope(q,k); att = causal_softmax(q kᵀ/√hd)·v; x2 = (x + att·Woᵀ) + bo;
// xn2 = rms(x2)·g2; h = act(xn2·Wgᵀ)·(xn2·Wuᵀ); out = x2 + h·Wdᵀ
// (Gemma: each rms(·)·g is rms(·)·(1 + g), act is GELU's tanh form; else act = silu)
// (each residual add happens in its projection's GEMM: matmul_forward_add, one rounding)
// (a bias or a q/k norm only where the family has one; rms_head normalises each head's hd values)
// LoRA adds each adapted projection's s·(input·Aᵀ)·Bᵀ to its output, bias included, before
// what follows it reads it (llama_lora.cpp). The ops on either side of the attention are
// decoder_layer_qkv and decoder_layer_mlp (model/decoder_layer.h), which the KV-cache decoder
// runs too.
void LlamaModel::layer_forward(int layer, ConstTensorView params, bool recompute,
                               ConstTensorView adapters) {
  const int64_t D = config_.hidden_size, H = config_.num_heads, Hkv = config_.num_kv_heads;
  const int64_t hd = config_.head_dim();
  const LayerWeights P = layer_weights(layout_, layer, params);
  const LayerActs A = acts_for(layer);
  const TensorView x = t_.resid[static_cast<size_t>(layer)];
  const TensorView out = t_.resid[static_cast<size_t>(layer) + 1];
  // cpu_checkpointing: keep the input on the host; a recompute brings it back. Both copies are
  // queued with the layer's ops: the host never reads `kept`, so it need not wait for them.
  if (const TensorView kept = t_.host_resid[static_cast<size_t>(layer)]) {
    const size_t bytes = view_bytes(kept, M_ * D);
    if (recompute)
      be_.device_memory().to_device_queued(x.data, kept.data, bytes);
    else
      be_.device_memory().to_host_queued(kept.data, x.data, bytes);
  }
  ProjectionAdapter adapt;
  if (config_.lora.enabled())
    adapt = [&](LoraTarget target, std::initializer_list<TensorView> ys, ConstTensorView in) {
      lora_forward(layer, target, ys, in, adapters, P);
    };
  decoder_layer_qkv(be_, config_, P, A, x, M_, adapt);
  const int32_t* doc_start = document_starts();
  const RopeSpec rope = config_.rope_for_layer(layer, T_);
  if (config_.layer_rotates(layer)) {  // SmolLM3's NoPE layers take none
    be_.rope_forward_qk(A.q, A.k, B_, T_, H, Hkv, hd, rope, doc_start);
  }
  be_.attention_forward(A.att, A.lse, A.q, A.k, A.v, B_, T_, H, Hkv, hd, doc_start,
                        config_.attention_scores(layer, T_));
  decoder_layer_mlp(be_, config_, P, A, x, out, M_, adapt);
}

void LlamaModel::rope_backward_qk(int layer, const int32_t* doc_start) {
  if (!config_.layer_rotates(layer)) return;  // SmolLM3's NoPE layers took none
  const int64_t H = config_.num_heads, Hkv = config_.num_kv_heads, hd = config_.head_dim();
  const RopeSpec rope = config_.rope_for_layer(layer, T_);
  be_.rope_backward_qk(t_.dq, t_.dk, B_, T_, H, Hkv, hd, rope, doc_start);
}

// On entry t_.dresid = ∂L/∂out; on exit t_.dresid = ∂L/∂x. Parameter gradients are accumulated, or
// the GEMMs' assigned (kAssign: backward_group zeroed the rest).
void LlamaModel::layer_backward(int layer, ConstTensorView params, float* grads,
                                ConstTensorView adapters, float* adapter_grads, GradWrite write) {
  if (ac_.is_checkpointed(layer))
    layer_forward(layer, params, true, adapters);  // recompute from the input
  const int64_t D = config_.hidden_size, KV = config_.kv_dim(), F = config_.intermediate_size;
  const int64_t H = config_.num_heads, Hkv = config_.num_kv_heads, hd = config_.head_dim();
  const int64_t QD = config_.q_dim();
  const LayerWeights P = layer_weights(layout_, layer, params);
  const LayerActs A = acts_for(layer);
  const ConstTensorView x = t_.resid[static_cast<size_t>(layer)];
  if (ac_.selective) {
    // Selective checkpointing kept the GEMM and attention outputs; the cheap ops between them run
    // again with the forward's kernels on the forward's inputs, so they give the forward's bits
    // (the statistics rstd1 and rstd2 are rewritten with the values they already hold).
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const float offset = config_.norm_weight_offset;
    if (config_.pre_norms) {
      be_.rmsnorm_forward(A.xn1, A.rstd1, x, P.input_norm, M_, D, eps, offset);
      be_.rmsnorm_forward(A.xn2, A.rstd2, A.x2, P.post_norm, M_, D, eps, offset);
    }
    be_.glu_forward(A.h, A.gate, A.up, M_ * F, config_.mlp_activation);
  }
  auto grad = [&](TensorRole r) { return layer_grad(r, layer, grads); };
  mlp_backward(layer, P, A, grads, adapters, adapter_grads, write);
  // attention: x2 = (x + att·Woᵀ) + bo;  dbo += Σ_rows ∂L/∂x2 (Gemma 2: x2 = x + rms(attn_out))
  const ConstTensorView dattn_out = branch_output_backward(
      layer, TensorRole::kAttnOutNorm, P.attn_out_norm, A.attn_out, A.rstd_attn_out, grads, write);
  if (P.bo && grad(TensorRole::kOBias))
    be_.bias_backward(grad(TensorRole::kOBias), dattn_out, M_, D);
  be_.matmul_backward(t_.datt, grad(TensorRole::kOProj), dattn_out, A.att, P.wo, M_, D, QD, false,
                      write);
  lora_backward(layer, LoraTarget::kO, t_.datt, {dattn_out}, A.att, adapters, adapter_grads, write,
                P);
  const int32_t* doc_start = document_starts();
  be_.attention_backward(t_.dq, t_.dk, t_.dv, t_.datt, A.q, A.k, A.v, A.att, A.lse, B_, T_, H, Hkv,
                         hd, doc_start, config_.attention_scores(layer, T_));
  rope_backward_qk(layer, doc_start);
  // dq, dk are now ∂L/∂(what RoPE rotated). Qwen3: back through the per-head norm into datt
  // (free after the attention's backward, as wide as q), giving ∂L/∂(the projection's output);
  // OLMo 2: through its norm of the whole projection.
  auto head_norm_backward = [&](ConstTensorView dy, TensorRole norm, ConstTensorView g,
                                ConstTensorView raw, const float* rstd, int64_t heads,
                                int64_t N) -> ConstTensorView {
    if (!g) return dy;
    const QkNormRows rows = qk_norm_rows(config_, heads);
    be_.zero(t_.datt, M_ * N);
    be_.rmsnorm_backward(t_.datt, grad(norm), dy, raw, g, rstd, M_ * rows.per_token, rows.width,
                         config_.norm_weight_offset, write);
    return t_.datt;
  };
  const ConstTensorView in = attention_input(config_, A, x);
  // The forward's projections: dxn (= or +=) dy·W, db += Σ_rows dy, and dW += dyᵀ·xn1 unless
  // the weight's product is batched (`batched`: the caller adds it with the others).
  // LoRA: the adapter's products on the same dy, before a q/k norm's dy is overwritten.
  auto linear_backward = [&](ConstTensorView dy, TensorRole w, ConstTensorView W, TensorRole b,
                             ConstTensorView bias, int64_t N, bool accumulate, bool batched) {
    if (bias && grad(b)) be_.bias_backward(grad(b), dy, M_, N);
    be_.matmul_backward(t_.dxn, batched ? nullptr : grad(w), dy, in, W, M_, N, D, accumulate,
                        write);
    const auto target = static_cast<LoraTarget>(lora_target_of(w));
    lora_backward(layer, target, t_.dxn, {dy}, in, adapters, adapter_grads, write, P);
  };
  // q's weight gradient joins k's and v's batch when it has their shape and its output gradient
  // stays put (a q/k norm's backward writes both into datt, one after the other).
  const bool q_batched = QD == KV && !P.q_norm;
  const ConstTensorView dq =
      head_norm_backward(t_.dq, TensorRole::kQNorm, P.q_norm, A.q_raw, A.rstd_q, H, QD);
  linear_backward(dq, TensorRole::kQProj, P.wq, TensorRole::kQBias, P.bq, QD, false, q_batched);
  const ConstTensorView dk =
      head_norm_backward(t_.dk, TensorRole::kKNorm, P.k_norm, A.k_raw, A.rstd_k, Hkv, KV);
  linear_backward(dk, TensorRole::kKProj, P.wk, TensorRole::kKBias, P.bk, KV, true, true);
  linear_backward(t_.dv, TensorRole::kVProj, P.wv, TensorRole::kVBias, P.bv, KV, true, true);
  // Phi-3's fused qkv_proj adapter (no q/k norms: dq and dk are the outputs' gradients).
  lora_backward(layer, LoraTarget::kQkv, t_.dxn, {dq, dk, t_.dv}, in, adapters, adapter_grads,
                write, P);
  float* const qkv_grads[] = {grad(TensorRole::kQProj), grad(TensorRole::kKProj),
                              grad(TensorRole::kVProj)};
  const ConstTensorView qkv_dys[] = {dq, dk, t_.dv};
  const int first = q_batched ? 0 : 1;
  be_.matmul_weight_grad_batch(qkv_grads + first, qkv_dys + first, in, 3 - first, M_, KV, D, write);
  // t_.dresid becomes ∂L/∂x = ∂L/∂x2 + rmsnorm_backward(dxn1) (OLMo 2: + dxn1 itself)
  pre_norm_backward(layer, TensorRole::kInputNorm, P.input_norm, x, A.rstd1, grads, write);
}

// ∂L/∂(a pre-norm's input) += the norm's backward of t_.dxn, ∂L/∂(its output), into t_.dresid; a
// layer without pre-norms (OLMo 2) fed its input to the projections, so t_.dxn adds as it is.
void LlamaModel::pre_norm_backward(int layer, TensorRole role, ConstTensorView g, ConstTensorView x,
                                   const float* rstd, float* grads, GradWrite write) {
  const int64_t D = config_.hidden_size;
  if (!config_.pre_norms) {
    be_.add_inplace(t_.dresid, t_.dxn, M_ * D);
    return;
  }
  be_.rmsnorm_backward(t_.dresid, layer_grad(role, layer, grads), t_.dxn, x, g, rstd, M_, D,
                       config_.norm_weight_offset, write);
}

// Where tensor r of `layer` accumulates its gradient in `grads`; null for a frozen tensor (its
// product is skipped).
float* LlamaModel::layer_grad(TensorRole r, int layer, float* grads) const {
  const TensorInfo& t = layout_.tensor(r, layer);
  return trainable_.trains(layout_.index_of(t)) ? grads + t.offset : nullptr;
}

// ∂L/∂y of a branch's output y (attn_out, mlp_out; decoder_layer.cpp's branch_to_residual) from
// ∂L/∂(the sum), t_.dresid: t_.dresid itself for a plain add; through Gemma 2's and OLMo 2's norm
// of y, or times Granite's residual_multiplier, into t_.dxn (free here), which is returned.
ConstTensorView LlamaModel::branch_output_backward(int layer, TensorRole role, ConstTensorView g,
                                                   ConstTensorView y, const float* rstd,
                                                   float* grads, GradWrite write) {
  if (config_.plain_residual_add()) return t_.dresid;
  const int64_t D = config_.hidden_size;
  if (!config_.sandwich_norms) {
    be_.device_memory().copy(t_.dxn.data, t_.dresid.data, view_bytes(t_.dxn, M_ * D));
    be_.scale_inplace(t_.dxn, static_cast<float>(config_.residual_multiplier), M_ * D);
    return t_.dxn;
  }
  be_.zero(t_.dxn, M_ * D);
  be_.rmsnorm_backward(t_.dxn, layer_grad(role, layer, grads), t_.dresid, y, g, rstd, M_, D,
                       config_.norm_weight_offset, write);
  return t_.dxn;
}

// The MLP half of layer_backward: on entry t_.dresid = ∂L/∂out, on exit ∂L/∂x2.
void LlamaModel::mlp_backward(int layer, const LayerWeights& P, const LayerActs& A, float* grads,
                              ConstTensorView adapters, float* adapter_grads, GradWrite write) {
  const int64_t D = config_.hidden_size, F = config_.intermediate_size;
  auto grad = [&](TensorRole r) { return layer_grad(r, layer, grads); };
  // out = x2 + (act(gate)·up)·Wdᵀ (Gemma 2: x2 + rms(mlp_out), mlp_out = h·Wdᵀ)
  const ConstTensorView dmlp_out = branch_output_backward(
      layer, TensorRole::kMlpOutNorm, P.mlp_out_norm, A.mlp_out, A.rstd_mlp_out, grads, write);
  be_.matmul_backward(t_.dh, grad(TensorRole::kDownProj), dmlp_out, A.h, P.wdown, M_, D, F, false,
                      write);
  lora_backward(layer, LoraTarget::kDown, t_.dh, {dmlp_out}, A.h, adapters, adapter_grads, write,
                P);
  be_.glu_backward(t_.dgate, t_.dup, t_.dh, A.gate, A.up, M_ * F, config_.mlp_activation);
  // dxn = dgate·Wg + dup·Wu; dWg += dgateᵀ·xn2 and dWu += dupᵀ·xn2 as one batch
  const ConstTensorView in = mlp_input(config_, A);
  be_.matmul_backward(t_.dxn, nullptr, t_.dgate, in, P.wgate, M_, F, D, false, write);
  be_.matmul_backward(t_.dxn, nullptr, t_.dup, in, P.wup, M_, F, D, true, write);
  lora_backward(layer, LoraTarget::kGate, t_.dxn, {t_.dgate}, in, adapters, adapter_grads, write,
                P);
  lora_backward(layer, LoraTarget::kUp, t_.dxn, {t_.dup}, in, adapters, adapter_grads, write, P);
  lora_backward(layer, LoraTarget::kGateUp, t_.dxn, {t_.dgate, t_.dup}, in, adapters, adapter_grads,
                write, P);
  float* const gate_up_grads[] = {grad(TensorRole::kGateProj), grad(TensorRole::kUpProj)};
  const ConstTensorView gate_up_dys[] = {t_.dgate, t_.dup};
  be_.matmul_weight_grad_batch(gate_up_grads, gate_up_dys, in, 2, M_, F, D, write);
  // t_.dresid becomes ∂L/∂x2 = ∂L/∂out + rmsnorm_backward(dxn2) (OLMo 2: + dxn2 itself)
  pre_norm_backward(layer, TensorRole::kPostAttnNorm, P.post_norm, A.x2, A.rstd2, grads, write);
}

}  // namespace zt

#include "model/llama.h"

#include <algorithm>
#include <string>
#include <vector>

#include "util/error.h"

namespace zt {

int64_t head_rows_per_chunk(int64_t rows, int64_t vocab) {
  ZT_CHECK(rows > 0 && vocab > 0, "head_rows_per_chunk: rows and vocab must be positive");
  const int64_t budget = kHeadChunkElements / vocab / kHeadChunkRowMultiple * kHeadChunkRowMultiple;
  return std::min(rows, std::max(kHeadChunkRowMultiple, budget));
}

int64_t ActivationPlan::per_layer_saved(const ModelConfig& c, int64_t B, int64_t T) {
  const int64_t M = B * T, D = c.hidden_size, KV = c.kv_dim(), F = c.intermediate_size;
  // xn1, q, att, x2, xn2: M·D each; k, v: M·KV; gate, up, h: M·F; rstd1, rstd2: M; lse: B·H·T.
  return 5 * M * D + 2 * M * KV + 3 * M * F + 2 * M + B * c.num_heads * T;
}

ActivationPlan ActivationPlan::make(const ModelConfig& c, int64_t B, int64_t T,
                                    const ActivationCheckpointing& ac, int64_t head_chunk_rows) {
  const int64_t M = B * T, D = c.hidden_size, KV = c.kv_dim(), F = c.intermediate_size;
  const int64_t L = c.num_layers;
  int64_t checkpointed = 0;
  for (int64_t l = 0; l < L; ++l) checkpointed += ac.is_checkpointed(l) ? 1 : 0;
  ActivationPlan p;
  p.host_residual = ac.on_host ? checkpointed * M * D : 0;
  // The residuals that go to the host pass through (at most) two device transit buffers.
  const int64_t transit = ac.on_host ? std::min<int64_t>(2, checkpointed) : 0;
  p.residual = (L + 1 + transit) * M * D - p.host_residual;
  p.layer_saved = (L - checkpointed + (checkpointed > 0 ? 1 : 0)) * per_layer_saved(c, B, T);
  const int64_t chunk =
      head_chunk_rows > 0 ? std::min(head_chunk_rows, M) : head_rows_per_chunk(M, c.vocab_size);
  p.head = M * D + M + chunk * c.vocab_size + M;
  p.grad_scratch = 4 * M * D + 2 * M * KV + 3 * M * F;
  return p;
}

LlamaModel::LlamaModel(const ModelConfig& config, Backend& backend, MemoryTracker& memory,
                       int64_t micro_batch, int64_t seq_len, ActivationCheckpointing ac,
                       int64_t head_chunk_rows)
    : config_(config),
      layout_(config),
      be_(backend),
      B_(micro_batch),
      T_(seq_len),
      M_(micro_batch * seq_len),
      ac_(ac) {
  ZT_CHECK(B_ > 0 && T_ > 0, "micro-batch and sequence length must be positive");
  ZT_CHECK(head_chunk_rows >= 0, "head_chunk_rows must be >= 0");
  head_chunk_ = head_chunk_rows > 0 ? std::min(head_chunk_rows, M_)
                                    : head_rows_per_chunk(M_, config_.vocab_size);
  // Activations (and every device-pool buffer of the engine) live in the backend's memory.
  ZT_CHECK(&memory.device_memory() == &backend.device_memory(),
           "the memory tracker accounts another device memory than the " + backend.name() +
               " backend's");
  ZT_CHECK(T_ <= config_.max_position_embeddings,
           "seq-len " + std::to_string(T_) + " exceeds max_position_embeddings " +
               std::to_string(config_.max_position_embeddings));
  const ActivationPlan plan = ActivationPlan::make(config_, B_, T_, ac_, head_chunk_);
  arena_ = TrackedBuffer<float>(memory, MemCategory::kActivations,
                                static_cast<size_t>(plan.device_elements()));
  if (plan.host_residual > 0)
    host_arena_ = TrackedBuffer<float>(memory, MemCategory::kHostOffload,
                                       static_cast<size_t>(plan.host_residual));
  tokens_ = TrackedBuffer<int32_t>(memory, MemCategory::kActivations, static_cast<size_t>(2 * M_));

  const int64_t D = config_.hidden_size, KV = config_.kv_dim(), F = config_.intermediate_size;
  const int64_t L = config_.num_layers;
  float* cursor = arena_.data();
  float* host_cursor = host_arena_.data();
  auto take = [](float*& c, int64_t n) {
    float* p = c;
    c += n;
    return p;
  };
  // cpu_checkpointing: the input of a checkpointed layer lives in a device transit buffer while
  // the layer runs and is kept in the host pool; consecutive such layers alternate between two
  // transits, so a layer's output never overwrites its own input.
  auto on_host = [&](int64_t l) { return l < L && ac_.on_host && ac_.is_checkpointed(l); };
  int64_t host_layers = 0;
  for (int64_t l = 0; l < L; ++l) host_layers += on_host(l) ? 1 : 0;
  std::vector<float*> transit;
  for (int64_t i = 0; i < std::min<int64_t>(2, host_layers); ++i)
    transit.push_back(take(cursor, M_ * D));
  resid_.resize(static_cast<size_t>(L + 1));
  host_resid_.assign(static_cast<size_t>(L + 1), nullptr);
  int64_t seen = 0;
  for (int64_t l = 0; l <= L; ++l) {
    if (on_host(l)) {
      host_resid_[static_cast<size_t>(l)] = take(host_cursor, M_ * D);
      resid_[static_cast<size_t>(l)] = transit[static_cast<size_t>(seen++ % 2)];
    } else {
      resid_[static_cast<size_t>(l)] = take(cursor, M_ * D);
    }
  }
  layer_acts_.resize(static_cast<size_t>(L));
  bool any_checkpointed = false;
  for (int64_t l = 0; l < L; ++l) {
    if (ac_.is_checkpointed(l)) {
      any_checkpointed = true;
    } else {
      layer_acts_[static_cast<size_t>(l)] = carve_layer(cursor);
    }
  }
  if (any_checkpointed) scratch_acts_ = carve_layer(cursor);
  final_norm_out_ = take(cursor, M_ * D);
  final_rstd_ = take(cursor, M_);
  logits_ = take(cursor, head_chunk_ * config_.vocab_size);
  losses_ = take(cursor, M_);
  dresid_ = take(cursor, M_ * D);
  dxn_ = take(cursor, M_ * D);
  dq_ = take(cursor, M_ * D);
  datt_ = take(cursor, M_ * D);
  dk_ = take(cursor, M_ * KV);
  dv_ = take(cursor, M_ * KV);
  dgate_ = take(cursor, M_ * F);
  dup_ = take(cursor, M_ * F);
  dh_ = take(cursor, M_ * F);
  ZT_CHECK(cursor == arena_.data() + plan.device_elements(), "activation arena plan mismatch");
}

LlamaModel::LayerActs LlamaModel::carve_layer(float*& c) const {
  const int64_t D = config_.hidden_size, KV = config_.kv_dim(), F = config_.intermediate_size;
  auto take = [&c](int64_t n) {
    float* p = c;
    c += n;
    return p;
  };
  LayerActs a{};
  a.xn1 = take(M_ * D);
  a.rstd1 = take(M_);
  a.q = take(M_ * D);
  a.k = take(M_ * KV);
  a.v = take(M_ * KV);
  a.att = take(M_ * D);
  a.lse = take(B_ * config_.num_heads * T_);
  a.x2 = take(M_ * D);
  a.xn2 = take(M_ * D);
  a.rstd2 = take(M_);
  a.gate = take(M_ * F);
  a.up = take(M_ * F);
  a.h = take(M_ * F);
  return a;
}

LlamaModel::LayerActs& LlamaModel::acts_for(int layer) {
  return ac_.is_checkpointed(layer) ? scratch_acts_ : layer_acts_[static_cast<size_t>(layer)];
}

LlamaModel::LayerParams LlamaModel::layer_params(int layer, const float* group) const {
  auto at = [&](TensorRole r) { return group + layout_.tensor(r, layer).offset; };
  return {at(TensorRole::kInputNorm), at(TensorRole::kQProj),  at(TensorRole::kKProj),
          at(TensorRole::kVProj),     at(TensorRole::kOProj),  at(TensorRole::kPostAttnNorm),
          at(TensorRole::kGateProj),  at(TensorRole::kUpProj), at(TensorRole::kDownProj)};
}

void LlamaModel::set_batch(const int32_t* inputs, const int32_t* targets) {
  for (int64_t i = 0; i < M_; ++i) {
    for (int32_t tok : {inputs[i], targets[i]}) {
      ZT_CHECK(tok >= 0 && tok < config_.vocab_size, "token " + std::to_string(tok) +
                                                         " is outside the vocabulary (vocab_size " +
                                                         std::to_string(config_.vocab_size) + ")");
    }
  }
  std::vector<int32_t> both(static_cast<size_t>(2 * M_));
  std::copy(inputs, inputs + M_, both.begin());
  std::copy(targets, targets + M_, both.begin() + M_);
  be_.device_memory().to_device(tokens_.data(), both.data(), both.size() * sizeof(int32_t));
}

void LlamaModel::forward_group(int g, const float* params, bool training, float grad_scale) {
  if (g == layout_.embed_group()) {
    embed_forward(params);
  } else if (g == layout_.head_group()) {
    head_forward(params, training, grad_scale);
  } else {
    layer_forward(g - 1, params, false);
  }
}

void LlamaModel::backward_group(int g, const float* params, float* grads) {
  if (g == layout_.embed_group()) {
    embed_backward(grads);
  } else if (g == layout_.head_group()) {
    head_backward(params, grads);
  } else {
    layer_backward(g - 1, params, grads);
  }
}

// ---- embedding: x = table[tokens];  dtable[tok] += dx ----
void LlamaModel::embed_forward(const float* params) {
  be_.embedding_forward(resid_[0], tokens_.data(), params, M_, config_.hidden_size);
}

void LlamaModel::embed_backward(float* grads) {
  be_.embedding_backward(grads, dresid_, tokens_.data(), M_, config_.hidden_size);
}

// ---- decoder layer ----
// xn1 = rms(x)·g1; q,k,v = xn1·W{q,k,v}ᵀ; rope(q,k); att = causal_softmax(q kᵀ/√hd)·v;
// x2 = x + att·Woᵀ; xn2 = rms(x2)·g2; h = silu(xn2·Wgᵀ)·(xn2·Wuᵀ); out = x2 + h·Wdᵀ
void LlamaModel::layer_forward(int layer, const float* params, bool recompute) {
  const int64_t D = config_.hidden_size, KV = config_.kv_dim(), F = config_.intermediate_size;
  const int64_t H = config_.num_heads, Hkv = config_.num_kv_heads, hd = config_.head_dim();
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const float theta = static_cast<float>(config_.rope_theta);
  const LayerParams P = layer_params(layer, params);
  const LayerActs& A = acts_for(layer);
  float* x = resid_[static_cast<size_t>(layer)];
  float* out = resid_[static_cast<size_t>(layer) + 1];
  // cpu_checkpointing: keep the input on the host; a recompute brings it back. Both copies are
  // queued with the layer's ops: the host never reads `kept`, so it need not wait for them.
  if (float* kept = host_resid_[static_cast<size_t>(layer)]) {
    const size_t bytes = static_cast<size_t>(M_ * D) * sizeof(float);
    if (recompute)
      be_.device_memory().to_device_queued(x, kept, bytes);
    else
      be_.device_memory().to_host_queued(kept, x, bytes);
  }

  be_.rmsnorm_forward(A.xn1, A.rstd1, x, P.input_norm, M_, D, eps);
  be_.matmul_forward(A.q, A.xn1, P.wq, M_, D, D);
  be_.matmul_forward(A.k, A.xn1, P.wk, M_, KV, D);
  be_.matmul_forward(A.v, A.xn1, P.wv, M_, KV, D);
  be_.rope_forward(A.q, B_, T_, H, hd, theta);
  be_.rope_forward(A.k, B_, T_, Hkv, hd, theta);
  be_.attention_forward(A.att, A.lse, A.q, A.k, A.v, B_, T_, H, Hkv, hd);
  be_.matmul_forward(A.x2, A.att, P.wo, M_, D, D);
  be_.add_inplace(A.x2, x, M_ * D);
  be_.rmsnorm_forward(A.xn2, A.rstd2, A.x2, P.post_norm, M_, D, eps);
  be_.matmul_forward(A.gate, A.xn2, P.wgate, M_, F, D);
  be_.matmul_forward(A.up, A.xn2, P.wup, M_, F, D);
  be_.swiglu_forward(A.h, A.gate, A.up, M_ * F);
  be_.matmul_forward(out, A.h, P.wdown, M_, D, F);
  be_.add_inplace(out, A.x2, M_ * D);
}

// On entry dresid_ = ∂L/∂out; on exit dresid_ = ∂L/∂x. Parameter gradients are accumulated.
void LlamaModel::layer_backward(int layer, const float* params, float* grads) {
  if (ac_.is_checkpointed(layer)) layer_forward(layer, params, true);  // recompute from the input
  const int64_t D = config_.hidden_size, KV = config_.kv_dim(), F = config_.intermediate_size;
  const int64_t H = config_.num_heads, Hkv = config_.num_kv_heads, hd = config_.head_dim();
  const float theta = static_cast<float>(config_.rope_theta);
  const LayerParams P = layer_params(layer, params);
  const LayerActs& A = acts_for(layer);
  const float* x = resid_[static_cast<size_t>(layer)];
  auto grad = [&](TensorRole r) { return grads + layout_.tensor(r, layer).offset; };

  // MLP: out = x2 + (silu(gate)·up)·Wdᵀ
  be_.matmul_backward(dh_, grad(TensorRole::kDownProj), dresid_, A.h, P.wdown, M_, D, F, false);
  be_.swiglu_backward(dgate_, dup_, dh_, A.gate, A.up, M_ * F);
  be_.matmul_backward(dxn_, grad(TensorRole::kGateProj), dgate_, A.xn2, P.wgate, M_, F, D, false);
  be_.matmul_backward(dxn_, grad(TensorRole::kUpProj), dup_, A.xn2, P.wup, M_, F, D, true);
  // dresid_ becomes ∂L/∂x2 = ∂L/∂out + rmsnorm_backward(dxn2)
  be_.rmsnorm_backward(dresid_, grad(TensorRole::kPostAttnNorm), dxn_, A.x2, P.post_norm, A.rstd2,
                       M_, D);
  // attention: x2 = x + att·Woᵀ
  be_.matmul_backward(datt_, grad(TensorRole::kOProj), dresid_, A.att, P.wo, M_, D, D, false);
  be_.attention_backward(dq_, dk_, dv_, datt_, A.q, A.k, A.v, A.att, A.lse, B_, T_, H, Hkv, hd);
  be_.rope_backward(dq_, B_, T_, H, hd, theta);
  be_.rope_backward(dk_, B_, T_, Hkv, hd, theta);
  be_.matmul_backward(dxn_, grad(TensorRole::kQProj), dq_, A.xn1, P.wq, M_, D, D, false);
  be_.matmul_backward(dxn_, grad(TensorRole::kKProj), dk_, A.xn1, P.wk, M_, KV, D, true);
  be_.matmul_backward(dxn_, grad(TensorRole::kVProj), dv_, A.xn1, P.wv, M_, KV, D, true);
  // dresid_ becomes ∂L/∂x = ∂L/∂x2 + rmsnorm_backward(dxn1)
  be_.rmsnorm_backward(dresid_, grad(TensorRole::kInputNorm), dxn_, x, P.input_norm, A.rstd1, M_,
                       D);
}

// ---- head: xf = rms(x_L)·gF; logits = xf·Whᵀ; loss = CE(logits, targets) ----
// Rows go in chunks of head_chunk_ (logits_ holds one chunk). Per chunk c of rows R:
//   forward   logits_R = xf_R·Whᵀ;  loss_R = CE(logits_R)  (dlogits_R in place when training)
//   backward  dxf_R = dlogits_R·Wh;  dWh += dlogits_Rᵀ·xf_R
// With one chunk the forward's dlogits are used as they are; with several, the backward
// recomputes each chunk's logits and dlogits (bitwise the forward's) before its two products.
void LlamaModel::head_logits(const float* head, int64_t r0, int64_t rows) {
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  be_.matmul_forward(logits_, final_norm_out_ + r0 * D, head, rows, V, D);
}

void LlamaModel::head_forward(const float* params, bool training, float grad_scale) {
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  const float* norm = params + layout_.tensor(TensorRole::kFinalNorm).offset;
  const float* head = params + layout_.tensor(TensorRole::kLmHead).offset;
  be_.rmsnorm_forward(final_norm_out_, final_rstd_, resid_.back(), norm, M_, D,
                      static_cast<float>(config_.rms_norm_eps));
  head_grad_scale_ = grad_scale;
  // Training computes dlogits even when a later chunk overwrites them: the losses are then the
  // ones the backward's recompute writes, bitwise, whatever the chunking.
  for (int64_t r0 = 0; r0 < M_; r0 += head_chunk_) {
    const int64_t rows = std::min(head_chunk_, M_ - r0);
    head_logits(head, r0, rows);
    be_.cross_entropy(losses_ + r0, training ? logits_ : nullptr, logits_, tokens_.data() + M_ + r0,
                      rows, V, grad_scale);
  }
}

void LlamaModel::head_backward(const float* params, float* grads) {
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  const TensorInfo& norm_t = layout_.tensor(TensorRole::kFinalNorm);
  const TensorInfo& head_t = layout_.tensor(TensorRole::kLmHead);
  const float* head = params + head_t.offset;
  for (int64_t r0 = 0; r0 < M_; r0 += head_chunk_) {
    const int64_t rows = std::min(head_chunk_, M_ - r0);
    if (head_chunks() > 1) {  // recompute this chunk's dlogits (and, identically, its losses)
      head_logits(head, r0, rows);
      be_.cross_entropy(losses_ + r0, logits_, logits_, tokens_.data() + M_ + r0, rows, V,
                        head_grad_scale_);
    }
    be_.matmul_backward(dxn_ + r0 * D, grads + head_t.offset, logits_, final_norm_out_ + r0 * D,
                        head, rows, V, D, false);
  }
  be_.zero(dresid_, M_ * D);
  be_.rmsnorm_backward(dresid_, grads + norm_t.offset, dxn_, resid_.back(), params + norm_t.offset,
                       final_rstd_, M_, D);
}

double sum_token_losses(const float* losses, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += losses[i];
  return s;
}

double LlamaModel::loss_sum() const {
  std::vector<float> losses(static_cast<size_t>(M_));
  be_.device_memory().to_host(losses.data(), losses_, losses.size() * sizeof(float));
  return sum_token_losses(losses.data(), M_);
}

std::vector<float> LlamaModel::logits() const {
  ZT_CHECK(head_chunks() == 1, "LlamaModel::logits(): the head runs in " +
                                   std::to_string(head_chunks()) +
                                   " chunks; only one chunk keeps every logit");
  std::vector<float> out(static_cast<size_t>(M_ * config_.vocab_size));
  be_.device_memory().to_host(out.data(), logits_, out.size() * sizeof(float));
  return out;
}

}  // namespace zt

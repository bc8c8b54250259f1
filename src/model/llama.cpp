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

namespace {

// Hands out consecutive tensors of an arena, each rounded up to kActivationAlignment bytes; with
// a null base it only counts (the pointers are null).
class ArenaCursor {
 public:
  explicit ArenaCursor(std::byte* base) : base_(base) {}
  TensorView take(int64_t n, DType dtype) {
    const int64_t bytes = n * static_cast<int64_t>(dtype_size(dtype));
    void* p = base_ ? base_ + used_ : nullptr;
    used_ += (bytes + kActivationAlignment - 1) / kActivationAlignment * kActivationAlignment;
    return {p, dtype};
  }
  float* take_f32(int64_t n) { return static_cast<float*>(take(n, DType::kFloat32).data); }
  int64_t used() const { return used_; }

 private:
  std::byte* base_;
  int64_t used_ = 0;
};

// Which of a layer's activations a carve takes: all of them, those selective checkpointing keeps
// per layer (everything but the norms' outputs and the SwiGLU product), or only those three.
enum class LayerPart { kAll, kKept, kRecomputed };

// Each adapter's rank (model/lora.h), [LoraTarget]: 0 where a layer has none.
using AdapterRanks = std::array<int64_t, kLoraTargets>;

// The ranks of each layer's adapters, then (last) the largest of each target over the layers, for
// the scratch a recomputed layer runs in.
std::vector<AdapterRanks> adapter_ranks(const ModelConfig& c) {
  std::vector<AdapterRanks> ranks(static_cast<size_t>(c.num_layers) + 1, AdapterRanks{});
  if (!c.lora.enabled()) return ranks;
  const auto adapters = c.lora.adapters(c.num_layers);
  for (size_t l = 0; l < adapters.size(); ++l)
    for (size_t t = 0; t < ranks[l].size(); ++t) {
      ranks[l][t] = adapters[l][t].rank;
      ranks.back()[t] = std::max(ranks.back()[t], ranks[l][t]);
    }
  return ranks;
}

LayerActivations carve_layer(ArenaCursor& c, const ModelConfig& config, int64_t B, int64_t T,
                             DType s, const AdapterRanks& lora_ranks,
                             LayerPart part = LayerPart::kAll) {
  const int64_t M = B * T, D = config.hidden_size, KV = config.kv_dim(), QD = config.q_dim();
  const int64_t F = config.intermediate_size;
  LayerActivations a;
  const bool norms = config.pre_norms;  // OLMo 2's projections read the residual stream itself
  if (part == LayerPart::kRecomputed) {
    if (norms) a.xn1 = c.take(M * D, s);
    if (norms) a.xn2 = c.take(M * D, s);
    a.h = c.take(M * F, s);
    return a;
  }
  if (part == LayerPart::kAll && norms) a.xn1 = c.take(M * D, s);
  if (norms) a.rstd1 = c.take_f32(M);
  // The outputs of the q/k/v projections sit in that order, one after the other, so that the
  // CUDA backend can issue them as one strided batch (backend/gemm_batch.h): q, k, v, or with
  // per-head q/k norms q, k, q_raw, k_raw, v (the projections write q_raw, k_raw and v).
  a.q = c.take(M * QD, s);
  a.k = c.take(M * KV, s);
  if (config.qk_norm) {
    a.q_raw = c.take(M * QD, s);
    a.k_raw = c.take(M * KV, s);
  }
  a.v = c.take(M * KV, s);
  if (config.qk_norm) {
    a.rstd_q = c.take_f32(M * qk_norm_rows(config, config.num_heads).per_token);
    a.rstd_k = c.take_f32(M * qk_norm_rows(config, config.num_kv_heads).per_token);
  }
  a.att = c.take(M * QD, s);
  a.lse = c.take_f32(B * config.num_heads * T);
  if (config.sandwich_norms) {  // Gemma 2: the GEMMs' outputs before their norms, kept
    a.attn_out = c.take(M * D, s);
    a.rstd_attn_out = c.take_f32(M);
    a.mlp_out = c.take(M * D, s);
    a.rstd_mlp_out = c.take_f32(M);
  }
  a.x2 = c.take(M * D, s);
  if (part == LayerPart::kAll && norms) a.xn2 = c.take(M * D, s);
  if (norms) a.rstd2 = c.take_f32(M);
  a.gate = c.take(M * F, s);
  a.up = c.take(M * F, s);
  if (part == LayerPart::kAll) a.h = c.take(M * F, s);
  for (size_t t = 0; t < lora_ranks.size(); ++t)  // u = s·(x·Aᵀ) of each adapter
    if (lora_ranks[t] > 0) a.lora[t] = c.take(M * lora_ranks[t], s);
  return a;
}

}  // namespace

ActivationPlan carve_activation_arena(const ModelConfig& c, int64_t B, int64_t T,
                                      const ActivationCheckpointing& ac, int64_t head_chunk_rows,
                                      DType storage, std::byte* device_base, std::byte* host_base,
                                      ActivationTensors& t) {
  ZT_CHECK(is_activation_dtype(storage),
           std::string("activations cannot be stored as ") + dtype_name(storage));
  ZT_CHECK(head_chunk_rows > 0, "carve_activation_arena: head_chunk_rows must be positive");
  ZT_CHECK(!(ac.selective && ac.every > 0),
           "activation checkpointing: selective and full/every:K are one policy or the other");
  ZT_CHECK(!(ac.forward_only && (ac.any() || ac.on_host)),
           "activation checkpointing: a forward-only model keeps nothing to checkpoint");
  const int64_t M = B * T, D = c.hidden_size, KV = c.kv_dim(), F = c.intermediate_size;
  const int64_t QD = c.q_dim(), L = c.num_layers;
  ArenaCursor dev(device_base), host(host_base);
  ActivationPlan plan;
  // cpu_checkpointing: the input of a checkpointed layer lives in a device transit buffer while
  // the layer runs and is kept in the host pool; consecutive such layers alternate between two
  // transits, so a layer's output never overwrites its own input.
  auto on_host = [&](int64_t l) { return l < L && ac.on_host && ac.is_checkpointed(l); };
  int64_t host_layers = 0;
  for (int64_t l = 0; l < L; ++l) host_layers += on_host(l) ? 1 : 0;
  std::vector<TensorView> transit;
  for (int64_t i = 0; i < std::min<int64_t>(2, host_layers); ++i)
    transit.push_back(dev.take(M * D, storage));
  t.resid.assign(static_cast<size_t>(L + 1), nullptr);
  t.host_resid.assign(static_cast<size_t>(L + 1), nullptr);
  // forward_only: layer l reads buffer l % 2 and writes the other.
  for (int64_t i = 0; ac.forward_only && i < std::min<int64_t>(2, L + 1); ++i)
    transit.push_back(dev.take(M * D, storage));
  int64_t seen = 0;
  for (int64_t l = 0; l <= L; ++l) {
    if (ac.forward_only) {
      t.resid[static_cast<size_t>(l)] = transit[static_cast<size_t>(l % 2)];
    } else if (on_host(l)) {
      t.host_resid[static_cast<size_t>(l)] = host.take(M * D, storage);
      t.resid[static_cast<size_t>(l)] = transit[static_cast<size_t>(seen++ % 2)];
    } else {
      t.resid[static_cast<size_t>(l)] = dev.take(M * D, storage);
    }
  }
  plan.residual = dev.used();
  plan.host_residual = host.used();
  t.layers.assign(static_cast<size_t>(L), LayerActivations{});
  bool any_checkpointed = false;
  const LayerPart per_layer = ac.selective ? LayerPart::kKept : LayerPart::kAll;
  const std::vector<AdapterRanks> ranks = adapter_ranks(c);
  for (int64_t l = 0; l < L; ++l) {
    if (ac.is_checkpointed(l) || ac.forward_only) {
      any_checkpointed = true;
    } else {
      t.layers[static_cast<size_t>(l)] =
          carve_layer(dev, c, B, T, storage, ranks[static_cast<size_t>(l)], per_layer);
    }
  }
  // The scratch: a whole layer for the recomputed ones, or the three tensors every layer
  // recomputes under selective checkpointing.
  if (any_checkpointed) t.scratch = carve_layer(dev, c, B, T, storage, ranks.back());
  if (ac.selective && L > 0)
    t.scratch = carve_layer(dev, c, B, T, storage, ranks.back(), LayerPart::kRecomputed);
  plan.layer_saved = dev.used() - plan.residual;
  t.final_norm_out = dev.take(M * D, storage);
  t.final_rstd = dev.take_f32(M);
  t.logits = dev.take(std::min(head_chunk_rows, M) * c.vocab_size, storage);
  t.losses = dev.take_f32(M);
  plan.head = dev.used() - plan.residual - plan.layer_saved;
  // LoRA's y += u·Bᵀ: the product [M, out] of the widest adapted projection.
  const AdapterRanks& largest = ranks.back();  // of each target over the layers
  const bool lora_mlp = largest[static_cast<size_t>(LoraTarget::kGate)] > 0 ||
                        largest[static_cast<size_t>(LoraTarget::kUp)] > 0 ||
                        largest[static_cast<size_t>(LoraTarget::kGateUp)] > 0;
  const int64_t lora_product = c.lora.enabled() ? M * std::max({D, QD, KV, lora_mlp ? F : 0}) : 0;
  if (ac.forward_only) {  // no backward temporaries
    if (lora_product > 0) t.lora_product = dev.take(lora_product, storage);
    plan.grad_scratch = dev.used() - plan.residual - plan.layer_saved - plan.head;
    return plan;
  }
  t.dresid = dev.take(M * D, storage);
  t.dxn = dev.take(M * D, storage);
  // Ordered for the batched weight gradients of the projections (backend/gemm_batch.h): dq, dk,
  // dv evenly spaced when QD = KV; with q/k norms, k's output gradient is written into datt,
  // which then comes before dv.
  t.dq = dev.take(M * QD, storage);
  if (c.qk_norm) t.datt = dev.take(M * QD, storage);
  t.dk = dev.take(M * KV, storage);
  t.dv = dev.take(M * KV, storage);
  if (!c.qk_norm) t.datt = dev.take(M * QD, storage);
  t.dgate = dev.take(M * F, storage);
  t.dup = dev.take(M * F, storage);
  t.dh = dev.take(M * F, storage);
  if (c.lora.enabled()) {
    t.lora_product = dev.take(lora_product, storage);
    t.lora_du = dev.take(M * *std::max_element(largest.begin(), largest.end()), storage);
    if (c.lora.dropout > 0) t.lora_dropped = dev.take(M * std::max({D, QD, F}), storage);
  }
  plan.grad_scratch = dev.used() - plan.residual - plan.layer_saved - plan.head;
  return plan;
}

ActivationPlan ActivationPlan::make(const ModelConfig& c, int64_t B, int64_t T,
                                    const ActivationCheckpointing& ac, int64_t head_chunk_rows,
                                    DType storage) {
  const int64_t chunk = head_chunk_rows > 0 ? std::min(head_chunk_rows, B * T)
                                            : head_rows_per_chunk(B * T, c.vocab_size);
  ActivationTensors counted;
  ActivationPlan plan =
      carve_activation_arena(c, B, T, ac, chunk, storage, nullptr, nullptr, counted);
  plan.token_bytes = 4 * B * T * static_cast<int64_t>(sizeof(int32_t));
  return plan;
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

// Whether one weight-gradient GEMM of the backward writes all of t's gradient, so that kAssign can
// overwrite it: the projections (one product each per micro-batch), the untied head (its first
// chunk's product) and the LoRA adapters. The embedding's scatter, the norms' and the biases'
// sums add into zeros instead.
static bool gemm_writes_gradient(const TensorInfo& t) {
  switch (t.role) {
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
    default:
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
    if (!gemm_writes_gradient(t) || !trainable_.trains(i)) continue;
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
      lora_forward(layer, target, ys, in, adapters);
    };
  decoder_layer_qkv(be_, config_, P, A, x, M_, adapt);
  const int32_t* doc_start = document_starts();
  const RopeSpec rope = config_.rope_for_layer(layer, T_);
  if (config_.layer_rotates(layer)) {  // SmolLM3's NoPE layers take none
    be_.rope_forward(A.q, B_, T_, H, hd, rope, doc_start);
    be_.rope_forward(A.k, B_, T_, Hkv, hd, rope, doc_start);
  }
  be_.attention_forward(A.att, A.lse, A.q, A.k, A.v, B_, T_, H, Hkv, hd, doc_start,
                        config_.attention_scores(layer, T_));
  decoder_layer_mlp(be_, config_, P, A, x, out, M_, adapt);
}

void LlamaModel::rope_backward_qk(int layer, const int32_t* doc_start) {
  if (!config_.layer_rotates(layer)) return;  // SmolLM3's NoPE layers took none
  const int64_t H = config_.num_heads, Hkv = config_.num_kv_heads, hd = config_.head_dim();
  const RopeSpec rope = config_.rope_for_layer(layer, T_);
  be_.rope_backward(t_.dq, B_, T_, H, hd, rope, doc_start);
  be_.rope_backward(t_.dk, B_, T_, Hkv, hd, rope, doc_start);
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
      layer, TensorRole::kAttnOutNorm, P.attn_out_norm, A.attn_out, A.rstd_attn_out, grads);
  if (P.bo && grad(TensorRole::kOBias))
    be_.bias_backward(grad(TensorRole::kOBias), dattn_out, M_, D);
  be_.matmul_backward(t_.datt, grad(TensorRole::kOProj), dattn_out, A.att, P.wo, M_, D, QD, false,
                      write);
  lora_backward(layer, LoraTarget::kO, t_.datt, {dattn_out}, A.att, adapters, adapter_grads, write);
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
                         config_.norm_weight_offset);
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
    lora_backward(layer, target, t_.dxn, {dy}, in, adapters, adapter_grads, write);
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
                write);
  float* const qkv_grads[] = {grad(TensorRole::kQProj), grad(TensorRole::kKProj),
                              grad(TensorRole::kVProj)};
  const ConstTensorView qkv_dys[] = {dq, dk, t_.dv};
  const int first = q_batched ? 0 : 1;
  be_.matmul_weight_grad_batch(qkv_grads + first, qkv_dys + first, in, 3 - first, M_, KV, D, write);
  // t_.dresid becomes ∂L/∂x = ∂L/∂x2 + rmsnorm_backward(dxn1) (OLMo 2: + dxn1 itself)
  pre_norm_backward(layer, TensorRole::kInputNorm, P.input_norm, x, A.rstd1, grads);
}

// ∂L/∂(a pre-norm's input) += the norm's backward of t_.dxn, ∂L/∂(its output), into t_.dresid; a
// layer without pre-norms (OLMo 2) fed its input to the projections, so t_.dxn adds as it is.
void LlamaModel::pre_norm_backward(int layer, TensorRole role, ConstTensorView g, ConstTensorView x,
                                   const float* rstd, float* grads) {
  const int64_t D = config_.hidden_size;
  if (!config_.pre_norms) {
    be_.add_inplace(t_.dresid, t_.dxn, M_ * D);
    return;
  }
  be_.rmsnorm_backward(t_.dresid, layer_grad(role, layer, grads), t_.dxn, x, g, rstd, M_, D,
                       config_.norm_weight_offset);
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
                                                   float* grads) {
  if (config_.plain_residual_add()) return t_.dresid;
  const int64_t D = config_.hidden_size;
  if (!config_.sandwich_norms) {
    be_.device_memory().copy(t_.dxn.data, t_.dresid.data, view_bytes(t_.dxn, M_ * D));
    be_.scale_inplace(t_.dxn, static_cast<float>(config_.residual_multiplier), M_ * D);
    return t_.dxn;
  }
  be_.zero(t_.dxn, M_ * D);
  be_.rmsnorm_backward(t_.dxn, layer_grad(role, layer, grads), t_.dresid, y, g, rstd, M_, D,
                       config_.norm_weight_offset);
  return t_.dxn;
}

// The MLP half of layer_backward: on entry t_.dresid = ∂L/∂out, on exit ∂L/∂x2.
void LlamaModel::mlp_backward(int layer, const LayerWeights& P, const LayerActs& A, float* grads,
                              ConstTensorView adapters, float* adapter_grads, GradWrite write) {
  const int64_t D = config_.hidden_size, F = config_.intermediate_size;
  auto grad = [&](TensorRole r) { return layer_grad(r, layer, grads); };
  // out = x2 + (act(gate)·up)·Wdᵀ (Gemma 2: x2 + rms(mlp_out), mlp_out = h·Wdᵀ)
  const ConstTensorView dmlp_out = branch_output_backward(
      layer, TensorRole::kMlpOutNorm, P.mlp_out_norm, A.mlp_out, A.rstd_mlp_out, grads);
  be_.matmul_backward(t_.dh, grad(TensorRole::kDownProj), dmlp_out, A.h, P.wdown, M_, D, F, false,
                      write);
  lora_backward(layer, LoraTarget::kDown, t_.dh, {dmlp_out}, A.h, adapters, adapter_grads, write);
  be_.glu_backward(t_.dgate, t_.dup, t_.dh, A.gate, A.up, M_ * F, config_.mlp_activation);
  // dxn = dgate·Wg + dup·Wu; dWg += dgateᵀ·xn2 and dWu += dupᵀ·xn2 as one batch
  const ConstTensorView in = mlp_input(config_, A);
  be_.matmul_backward(t_.dxn, nullptr, t_.dgate, in, P.wgate, M_, F, D, false, write);
  be_.matmul_backward(t_.dxn, nullptr, t_.dup, in, P.wup, M_, F, D, true, write);
  lora_backward(layer, LoraTarget::kGate, t_.dxn, {t_.dgate}, in, adapters, adapter_grads, write);
  lora_backward(layer, LoraTarget::kUp, t_.dxn, {t_.dup}, in, adapters, adapter_grads, write);
  lora_backward(layer, LoraTarget::kGateUp, t_.dxn, {t_.dgate, t_.dup}, in, adapters, adapter_grads,
                write);
  float* const gate_up_grads[] = {grad(TensorRole::kGateProj), grad(TensorRole::kUpProj)};
  const ConstTensorView gate_up_dys[] = {t_.dgate, t_.dup};
  be_.matmul_weight_grad_batch(gate_up_grads, gate_up_dys, in, 2, M_, F, D, write);
  // t_.dresid becomes ∂L/∂x2 = ∂L/∂out + rmsnorm_backward(dxn2) (OLMo 2: + dxn2 itself)
  pre_norm_backward(layer, TensorRole::kPostAttnNorm, P.post_norm, A.x2, A.rstd2, grads);
}

}  // namespace zt

// The activation arena of one micro-batch (model/llama.h's ActivationTensors and ActivationPlan):
// where each layer's activations, the head's and the backward's temporaries lie, carved by one
// function that both lays them out and counts them, so that the plan and the arena agree.
#include <algorithm>
#include <array>
#include <vector>

#include "model/llama.h"

namespace zt {

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

// LoRA's temporaries (llama_lora.cpp), `largest` each target's largest rank over the layers: the
// product u·Bᵀ [M, out] of the widest adapted projection; with DoRA the base product of the
// widest adapter (a fused target's parts together) and its row norms; for the backward ∂L/∂u and,
// with dropout, the dropped input.
void carve_lora_temporaries(ArenaCursor& dev, const ModelConfig& c, int64_t M,
                            const AdapterRanks& largest, DType storage, bool backward,
                            ActivationTensors& t) {
  if (!c.lora.enabled()) return;
  const int64_t D = c.hidden_size, KV = c.kv_dim(), QD = c.q_dim(), F = c.intermediate_size;
  const bool lora_mlp = largest[static_cast<size_t>(LoraTarget::kGate)] > 0 ||
                        largest[static_cast<size_t>(LoraTarget::kUp)] > 0 ||
                        largest[static_cast<size_t>(LoraTarget::kGateUp)] > 0;
  t.lora_product = dev.take(M * std::max({D, QD, KV, lora_mlp ? F : 0}), storage);
  int64_t dora_rows = 0;
  for (size_t i = 0; c.lora.use_dora && i < largest.size(); ++i)
    if (largest[i] > 0) dora_rows = std::max(dora_rows, lora_projection_shape(c, LoraTarget(i))[0]);
  if (dora_rows > 0) {
    t.dora_base = dev.take(M * dora_rows, storage);
    t.dora_norms = dev.take_f32(dora_rows);
  }
  if (!backward) return;
  t.lora_du = dev.take(M * *std::max_element(largest.begin(), largest.end()), storage);
  if (c.lora.dropout > 0) t.lora_dropped = dev.take(M * std::max({D, QD, F}), storage);
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
  if (ac.forward_only) {  // no backward temporaries
    carve_lora_temporaries(dev, c, M, ranks.back(), storage, false, t);
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
  carve_lora_temporaries(dev, c, M, ranks.back(), storage, true, t);
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
  plan.token_bytes = (4 * B * T + 1) * static_cast<int64_t>(sizeof(int32_t));
  return plan;
}

}  // namespace zt

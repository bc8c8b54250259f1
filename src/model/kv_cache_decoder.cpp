#include "model/kv_cache_decoder.h"

#include <algorithm>
#include <string>

#include "model/decoder_layer.h"
#include "model/llama.h"
#include "util/error.h"

namespace zt {

KvCacheDecoder::KvCacheDecoder(const ModelConfig& config, Backend& backend, MemoryTracker& memory,
                               int64_t max_positions, int64_t max_rows)
    : config_(config),
      layout_(config),
      be_(backend),
      max_positions_(max_positions),
      max_rows_(max_rows) {
  ZT_CHECK(max_positions_ > 0 && max_positions_ <= config_.max_positions(),
           "decoding " + std::to_string(max_positions_) + " positions: the model's " +
               config_.max_positions_text());
  // Longrope: the forward that passes the original length runs every position so far again.
  const int64_t original = config_.rope_scaling.original_max_positions;
  if (config_.rope_scaling.type == RopeScaling::kLongrope && max_rows_ <= original &&
      max_positions_ > original)
    max_rows_ = std::min(max_positions_, original + max_rows_);
  ZT_CHECK(max_rows_ > 0 && max_rows_ <= max_positions_,
           "decoding: " + std::to_string(max_rows_) + " rows per forward, with " +
               std::to_string(max_positions_) + " positions");
  ZT_CHECK(&memory.device_memory() == &backend.device_memory(),
           "the memory tracker accounts another device memory than the " + backend.name() +
               " backend's");
  ZT_CHECK(!config_.lora.enabled(),
           "decoding does not carry LoRA adapters: merge them first (export --merge-lora)");
  const int64_t T = max_rows_, D = config_.hidden_size, KV = config_.kv_dim();
  const int64_t QD = config_.q_dim(), F = config_.intermediate_size, H = config_.num_heads;
  auto buffer = [&](int64_t n) {
    return TrackedBuffer<float>(memory, MemCategory::kActivations, static_cast<size_t>(n));
  };
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    keys_.push_back(buffer(max_positions_ * KV));
    values_.push_back(buffer(max_positions_ * KV));
  }
  for (TrackedBuffer<float>& r : resid_) r = buffer(T * D);
  xn_ = buffer(T * D);
  q_ = buffer(T * QD);
  if (config_.qk_norm) {
    q_raw_ = buffer(T * QD);
    k_raw_ = buffer(T * KV);
  }
  att_ = buffer(T * QD);
  x2_ = buffer(T * D);
  if (config_.sandwich_norms) {  // Gemma 2's projection outputs before their norms
    attn_out_ = buffer(T * D);
    mlp_out_ = buffer(T * D);
  }
  gate_ = buffer(T * F);
  up_ = buffer(T * F);
  h_ = buffer(T * F);
  rstd_ = buffer(T);
  rstd_heads_ = buffer(T * H);
  lse_ = buffer(T * H);
  head_in_ = buffer(D);
  logits_ = buffer(config_.vocab_size);
  tokens_ = TrackedBuffer<int32_t>(memory, MemCategory::kActivations, static_cast<size_t>(T));
}

std::vector<float> KvCacheDecoder::forward(const int32_t* tokens, int64_t n,
                                           const std::vector<ConstTensorView>& params) {
  // transformers (4.46, Phi3ForCausalLM.prepare_inputs_for_generation) drops the cache once the
  // sequence reaches original + 1 with at most original positions cached, and runs it whole: every
  // key then takes the long factors.
  const int64_t original = config_.rope_scaling.original_max_positions;
  if (config_.rope_scaling.type == RopeScaling::kLongrope && length_ > 0 && length_ <= original &&
      length_ + n > original) {
    std::vector<int32_t> whole = history_;
    whole.insert(whole.end(), tokens, tokens + n);
    length_ = 0;
    history_.clear();
    return forward(whole.data(), static_cast<int64_t>(whole.size()), params);
  }
  ZT_CHECK(n > 0 && n <= max_rows_ && length_ + n <= max_positions_,
           "decoding " + std::to_string(n) + " tokens after " + std::to_string(length_) +
               ": the cache holds " + std::to_string(max_positions_) + " positions, a forward " +
               std::to_string(max_rows_) + " tokens");
  ZT_CHECK(static_cast<int>(params.size()) == layout_.num_groups(),
           "decoding: " + std::to_string(params.size()) +
               " parameter groups given, the layout has " + std::to_string(layout_.num_groups()));
  for (int64_t i = 0; i < n; ++i)
    ZT_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab_size,
             "token " + std::to_string(tokens[i]) + " is outside the vocabulary (vocab_size " +
                 std::to_string(config_.vocab_size) + ")");
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  be_.device_memory().to_device(tokens_.data(), tokens, static_cast<size_t>(n) * sizeof(int32_t));
  const ConstTensorView embedding = params[static_cast<size_t>(layout_.embed_group())];
  be_.embedding_forward(resid_[0].data(), tokens_.data(),
                        embedding.at(layout_.tensor(TensorRole::kEmbedding).offset), n, D);
  const float scale = config_.embedding_scale(DType::kFloat32);  // Gemma's sqrt(D), else 1
  if (scale != 1.0f) be_.scale_inplace(resid_[0].data(), scale, n * D);
  const int64_t L = config_.num_layers;
  for (int64_t l = 0; l < L; ++l)
    layer_forward(static_cast<int>(l), params[static_cast<size_t>(l) + 1], resid_[l % 2].data(),
                  resid_[(l + 1) % 2].data(), n);
  // The head, for the last row alone: xf = rms(x)·gF; logits = xf·Whᵀ (Gemma 2: soft-capped).
  const ConstTensorView head_group = params[static_cast<size_t>(layout_.head_group())];
  const ConstTensorView head = head_weight(layout_, head_group, embedding);
  be_.rmsnorm_forward(head_in_.data(), rstd_.data(), resid_[L % 2].data() + (n - 1) * D,
                      head_group.at(layout_.tensor(TensorRole::kFinalNorm).offset), 1, D,
                      static_cast<float>(config_.rms_norm_eps), config_.norm_weight_offset);
  be_.matmul_forward(logits_.data(), head_in_.data(), head, 1, V, D);
  if (config_.logits_scaling != 1.0) be_.scale_inplace(logits_.data(), config_.logits_factor(), V);
  if (config_.final_logit_softcap > 0.0f)
    be_.softcap_inplace(logits_.data(), config_.final_logit_softcap, V);
  length_ += n;
  history_.insert(history_.end(), tokens, tokens + n);
  std::vector<float> row(static_cast<size_t>(V));
  be_.device_memory().to_host(row.data(), logits_.data(), row.size() * sizeof(float));
  return row;
}

// The decoder layer of LlamaModel::layer_forward (model/decoder_layer.h's halves) over the n new
// rows at positions past = length_..: their keys and values go into the cache at rows past..,
// and their queries attend over every cached row up to their own.
void KvCacheDecoder::layer_forward(int layer, ConstTensorView params, TensorView x, TensorView out,
                                   int64_t n) {
  const int64_t KV = config_.kv_dim(), H = config_.num_heads, Hkv = config_.num_kv_heads;
  const int64_t hd = config_.head_dim(), past = length_;
  float* const cached_keys = keys_[static_cast<size_t>(layer)].data();
  float* const cached_values = values_[static_cast<size_t>(layer)].data();
  LayerActivations A;  // one layer's buffers, shared by every layer; k and v in the cache
  A.xn1 = A.xn2 = xn_.data();
  A.q = q_.data();
  A.k = cached_keys + past * KV;
  A.v = cached_values + past * KV;
  A.q_raw = q_raw_.data();
  A.k_raw = k_raw_.data();
  A.att = att_.data();
  A.x2 = x2_.data();
  A.attn_out = attn_out_.data();
  A.mlp_out = mlp_out_.data();
  A.rstd_attn_out = A.rstd_mlp_out = rstd_.data();
  A.gate = gate_.data();
  A.up = up_.data();
  A.h = h_.data();
  A.rstd1 = A.rstd2 = rstd_.data();
  A.rstd_q = A.rstd_k = rstd_heads_.data();
  A.lse = lse_.data();
  const LayerWeights P = layer_weights(layout_, layer, params);
  decoder_layer_qkv(be_, config_, P, A, x, n, {});
  // Longrope: the factors of this forward's key/value length, as transformers 4.46's Phi-3 rotates
  // (short up to the original length; past it forward() has run every position again).
  const RopeSpec rope = config_.rope_for_layer(layer, past + n);
  if (config_.layer_rotates(layer)) {  // SmolLM3's NoPE layers take none
    be_.rope_forward_after(A.q, 1, n, H, hd, rope, past);
    be_.rope_forward_after(A.k, 1, n, Hkv, hd, rope, past);
  }
  be_.attention_forward_after(A.att, A.lse, A.q, cached_keys, cached_values, 1, n, past, H, Hkv, hd,
                              config_.attention_scores(layer, past + n));
  decoder_layer_mlp(be_, config_, P, A, x, out, n, {});
}

}  // namespace zt

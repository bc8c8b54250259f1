#include "model/kv_cache_decoder.h"

#include <string>

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
  ZT_CHECK(max_positions_ > 0 && max_positions_ <= config_.max_position_embeddings,
           "decoding " + std::to_string(max_positions_) +
               " positions: the model's max_position_embeddings is " +
               std::to_string(config_.max_position_embeddings));
  // A window of W tokens masks keys more than W − 1 positions back: none while length ≤ W.
  ZT_CHECK(config_.sliding_window == 0 || max_positions_ <= config_.sliding_window,
           "decoding " + std::to_string(max_positions_) +
               " positions exceeds the model's sliding_window of " +
               std::to_string(config_.sliding_window) +
               " tokens: attention over a window shorter than the sequence is not implemented");
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
  const int64_t L = config_.num_layers;
  for (int64_t l = 0; l < L; ++l)
    layer_forward(static_cast<int>(l), params[static_cast<size_t>(l) + 1], resid_[l % 2].data(),
                  resid_[(l + 1) % 2].data(), n);
  // The head, for the last row alone: xf = rms(x)·gF; logits = xf·Whᵀ.
  const ConstTensorView head_group = params[static_cast<size_t>(layout_.head_group())];
  const ConstTensorView head = head_weight(layout_, head_group, embedding);
  be_.rmsnorm_forward(head_in_.data(), rstd_.data(), resid_[L % 2].data() + (n - 1) * D,
                      head_group.at(layout_.tensor(TensorRole::kFinalNorm).offset), 1, D,
                      static_cast<float>(config_.rms_norm_eps));
  be_.matmul_forward(logits_.data(), head_in_.data(), head, 1, V, D);
  length_ += n;
  std::vector<float> row(static_cast<size_t>(V));
  be_.device_memory().to_host(row.data(), logits_.data(), row.size() * sizeof(float));
  return row;
}

// The decoder layer of LlamaModel::layer_forward (model/llama.cpp) over the n new rows at
// positions past = length_..: their keys and values go into the cache at rows past.., and their
// queries attend over every cached row up to their own.
void KvCacheDecoder::layer_forward(int layer, ConstTensorView params, TensorView x, TensorView out,
                                   int64_t n) {
  const int64_t D = config_.hidden_size, KV = config_.kv_dim(), F = config_.intermediate_size;
  const int64_t H = config_.num_heads, Hkv = config_.num_kv_heads, hd = config_.head_dim();
  const int64_t QD = config_.q_dim(), past = length_;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const RopeSpec rope = config_.rope();
  const LayerWeights P = layer_weights(layout_, layer, params);
  float* const cached_keys = keys_[static_cast<size_t>(layer)].data();
  float* const cached_values = values_[static_cast<size_t>(layer)].data();
  float* const k = cached_keys + past * KV;
  float* const v = cached_values + past * KV;

  be_.rmsnorm_forward(xn_.data(), rstd_.data(), x, P.input_norm, n, D, eps);
  const bool qk_norm = config_.qk_norm;
  float* const q_out = qk_norm ? q_raw_.data() : q_.data();
  float* const k_out = qk_norm ? k_raw_.data() : k;
  be_.matmul_forward(q_out, xn_.data(), P.wq, n, QD, D);
  be_.matmul_forward(k_out, xn_.data(), P.wk, n, KV, D);
  be_.matmul_forward(v, xn_.data(), P.wv, n, KV, D);
  if (P.bq) be_.bias_forward(q_out, P.bq, n, QD);
  if (P.bk) be_.bias_forward(k_out, P.bk, n, KV);
  if (P.bv) be_.bias_forward(v, P.bv, n, KV);
  if (qk_norm) {  // each head's hd values are one row of the norm
    be_.rmsnorm_forward(q_.data(), rstd_heads_.data(), q_raw_.data(), P.q_norm, n * H, hd, eps);
    be_.rmsnorm_forward(k, rstd_heads_.data(), k_raw_.data(), P.k_norm, n * Hkv, hd, eps);
  }
  be_.rope_forward_after(q_.data(), 1, n, H, hd, rope, past);
  be_.rope_forward_after(k, 1, n, Hkv, hd, rope, past);
  be_.attention_forward_after(att_.data(), lse_.data(), q_.data(), cached_keys, cached_values, 1, n,
                              past, H, Hkv, hd);
  be_.matmul_forward_add(x2_.data(), att_.data(), P.wo, x, n, D, QD);  // x2 = x + att·Woᵀ
  if (P.bo) be_.bias_forward(x2_.data(), P.bo, n, D);
  be_.rmsnorm_forward(xn_.data(), rstd_.data(), x2_.data(), P.post_norm, n, D, eps);
  be_.matmul_forward(gate_.data(), xn_.data(), P.wgate, n, F, D);
  be_.matmul_forward(up_.data(), xn_.data(), P.wup, n, F, D);
  be_.swiglu_forward(h_.data(), gate_.data(), up_.data(), n * F);
  be_.matmul_forward_add(out, h_.data(), P.wdown, x2_.data(), n, D, F);  // out = x2 + h·Wdᵀ
}

}  // namespace zt

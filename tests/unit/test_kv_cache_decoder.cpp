// Incremental decoding with a key/value cache (model/kv_cache_decoder.h) against the model it
// stands in for: the logits of each position, decoded after a prompt one token at a time, equal
// those of a forward-only LlamaModel over the whole sequence (the model the oracle tests check
// against transformers) within the oracle's fp32 tolerance, 1e-4 relative. They cannot be bitwise:
// a product of one row is computed by another OpenBLAS call shape than a row of a whole window.
// The families' extra tensors (biases, Qwen3's q/k norms, head_dim ≠ hidden/heads), SmolLM3's
// layers without RoPE, sliding windows the sequence outgrows (Mistral's on every layer, Gemma 2's
// on every other), OLMo 2's norms, Granite's scalars, GLM-4's rotation in adjacent pairs and tied
// embeddings are covered, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/init.h"
#include "model/kv_cache_decoder.h"
#include "model/layout.h"
#include "model/llama.h"
#include "support/family_shapes.h"
#include "support/gemma3_shape.h"
#include "util/error.h"
#include "util/memory.h"

namespace zt {
namespace {

ModelConfig llama_untied() {
  ModelConfig c = preset_config("tiny");  // D 64, H 4, Hkv 2, 2 layers, V 256
  c.tie_word_embeddings = false;
  c.validate();
  return c;
}

ModelConfig llama_tied() {
  ModelConfig c = preset_config("tiny");
  c.tie_word_embeddings = true;
  c.validate();
  return c;
}

ModelConfig qwen3_with_biases() {
  ModelConfig c = llama_untied();
  c.explicit_head_dim = 24;
  c.qkv_bias = c.o_bias = c.qk_norm = true;
  c.validate();
  return c;
}

// SmolLM3's shape: its second layer without RoPE (NoPE), tied embeddings.
ModelConfig smollm3_tied() {
  ModelConfig c = llama_tied();
  c.layers_without_rope = {1};
  c.validate();
  return c;
}

// Mistral's shape: a sliding window of 9 keys on every layer, which the prompt of 13 tokens and
// every position decoded after it outgrow.
ModelConfig mistral_windowed() {
  ModelConfig c = llama_untied();
  c.sliding_window = 9;
  c.validate();
  return c;
}

// Gemma 2's shape: Gemma's norms, scaled embedding and GeGLU, sandwich norms, its own scale of the
// scores, caps that bend these scores and logits, a window of 20 keys on its first layer (its
// second attends over every key), shorter than the sequence.
ModelConfig gemma2_tied() {
  ModelConfig c = llama_tied();
  c.use_gemma_math();
  c.sandwich_norms = true;
  c.query_pre_attn_scalar = 20;
  c.attn_logit_softcap = 2.0f;
  c.final_logit_softcap = 3.0f;
  c.sliding_window = 20;
  c.validate();
  return c;
}

// Gemma 3's shape: Gemma 2's without caps, with q/k norms, its window (20 keys) on every layer but
// each second, those layers rotating with a base of their own.
ModelConfig gemma3_tied() {
  return gemma3_from_gemma2_shape(gemma2_tied(), 20);
}

// Weights with O(1) activations, so that every path moves the logits: the layout's init scaled
// by 8 (std 0.16 over D = 64 inputs), norms and q/k norms 1 + N(0, 0.1²), biases N(0, 0.1²).
std::vector<std::vector<float>> strong_params(const ModelConfig& c) {
  const ParamLayout layout(c);
  std::mt19937 gen(17);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  std::vector<std::vector<float>> params;
  for (const GroupInfo& g : layout.groups()) {
    params.emplace_back(static_cast<size_t>(g.numel), 0.0f);
    for (int ti : g.tensors) {
      const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
      float* dst = params.back().data() + t.offset;
      init_tensor_range(c, t, 23, 0, t.numel, dst);
      const bool norm = t.role == TensorRole::kInputNorm || t.role == TensorRole::kPostAttnNorm ||
                        t.role == TensorRole::kFinalNorm || t.role == TensorRole::kQNorm ||
                        t.role == TensorRole::kKNorm || t.role == TensorRole::kAttnOutNorm ||
                        t.role == TensorRole::kMlpOutNorm;
      for (int64_t i = 0; i < t.numel; ++i)
        dst[i] = norm ? 1.0f + noise(gen) : t.is_bias() ? noise(gen) : 8.0f * dst[i];
    }
  }
  return params;
}

std::vector<int32_t> some_tokens(const ModelConfig& c, int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * 97 + 5) % c.vocab_size);
  return tokens;
}

// The logits of every position [T, V], from a forward-only model over the whole sequence.
std::vector<float> whole_window_logits(const ModelConfig& c,
                                       const std::vector<std::vector<float>>& params,
                                       const std::vector<int32_t>& tokens) {
  auto be = make_cpu_backend();
  MemoryTracker memory;
  ActivationCheckpointing forward_only;
  forward_only.forward_only = true;
  const auto T = static_cast<int64_t>(tokens.size());
  LlamaModel model(c, *be, memory, 1, T, forward_only, T);
  model.set_batch(tokens.data(), tokens.data());
  const ParamLayout& layout = model.layout();
  for (int g = 0; g < layout.num_groups(); ++g) {
    const bool tied_head = layout.tied_embeddings() && g == layout.head_group();
    model.forward_group(g, params[g].data(), false, 1.0f,
                        tied_head ? ConstTensorView(params[0].data()) : ConstTensorView());
  }
  return model.logits();
}

double relative_norm_error(const float* got, const float* want, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

std::vector<ConstTensorView> views_of(const std::vector<std::vector<float>>& params) {
  std::vector<ConstTensorView> views;
  for (const std::vector<float>& p : params) views.emplace_back(p.data());
  return views;
}

constexpr double kFp32OracleTolerance = 1e-4;

TEST(KvCacheDecoder, EachPositionsLogitsAreTheWholeWindowsAfterAPromptAndOneTokenAtATime) {
  for (const ModelConfig& c :
       {llama_untied(), llama_tied(), qwen3_with_biases(), smollm3_tied(), mistral_windowed(),
        gemma2_tied(), gemma3_tied(), olmo2_from_llama_shape(llama_untied()),
        olmo3_from_llama_shape(llama_untied(), 20), granite_from_llama_shape(llama_tied()),
        glm4_from_llama_shape(llama_untied())}) {
    const int64_t T = 70, prompt = 13;  // a prompt of 13 rows, then 57 of one
    const std::vector<std::vector<float>> params = strong_params(c);
    const std::vector<int32_t> tokens = some_tokens(c, T);
    const std::vector<float> want = whole_window_logits(c, params, tokens);
    const int64_t V = c.vocab_size;

    auto be = make_cpu_backend();
    MemoryTracker memory;
    KvCacheDecoder decoder(c, *be, memory, T, prompt);
    const std::vector<ConstTensorView> views = views_of(params);
    std::vector<float> row = decoder.forward(tokens.data(), prompt, views);
    double worst = relative_norm_error(row.data(), want.data() + (prompt - 1) * V, V);
    EXPECT_LT(worst, kFp32OracleTolerance) << "the prompt's last position";
    for (int64_t t = prompt; t < T; ++t) {
      row = decoder.forward(tokens.data() + t, 1, views);
      ASSERT_EQ(decoder.length(), t + 1);
      const double err = relative_norm_error(row.data(), want.data() + t * V, V);
      worst = std::max(worst, err);
      EXPECT_LT(err, kFp32OracleTolerance)
          << "position " << t << ", qk_norm " << c.qk_norm << ", tied " << c.tie_word_embeddings
          << ", window " << c.sliding_window;
    }
    // The logits are not flat: a 1e-4 bound means something.
    double spread = 0;
    for (int64_t v = 0; v < V; ++v) spread = std::max(spread, std::fabs(double(row[v]) - row[0]));
    EXPECT_GT(spread, 1.0);
    std::cout << "qk_norm " << c.qk_norm << ", tied " << c.tie_word_embeddings
              << ": worst relative logits error " << worst << "\n";
  }
}

TEST(KvCacheDecoder, RefusesWhatItCannotDecode) {
  const ModelConfig c = llama_untied();
  auto be = make_cpu_backend();
  MemoryTracker memory;
  const std::vector<std::vector<float>> params = strong_params(c);
  const std::vector<ConstTensorView> views = views_of(params);
  EXPECT_THROW(KvCacheDecoder(c, *be, memory, c.max_position_embeddings + 1, 1), Error);
  EXPECT_THROW(KvCacheDecoder(c, *be, memory, 4, 5), Error);
  EXPECT_THROW(KvCacheDecoder(c, *be, memory, 4, 0), Error);
  KvCacheDecoder decoder(c, *be, memory, 4, 3);
  const std::vector<int32_t> tokens = some_tokens(c, 5);
  EXPECT_THROW(decoder.forward(tokens.data(), 4, views), Error);  // more rows than a forward's
  const int32_t outside = static_cast<int32_t>(c.vocab_size);
  EXPECT_THROW(decoder.forward(&outside, 1, views), Error);
  EXPECT_THROW(decoder.forward(tokens.data(), 1, {views.begin(), views.end() - 1}), Error);
  EXPECT_EQ(decoder.length(), 0);
  decoder.forward(tokens.data(), 3, views);
  EXPECT_THROW(decoder.forward(tokens.data(), 2, views), Error);  // past the cache
  decoder.forward(tokens.data(), 1, views);
  EXPECT_EQ(decoder.length(), 4);
  EXPECT_THROW(decoder.forward(tokens.data(), 1, views), Error);  // full
  ModelConfig lora = c;
  lora.lora.rank = 4;
  lora.lora.targets[0] = true;
  EXPECT_THROW(KvCacheDecoder(lora, *be, memory, 4, 1), Error);
}

}  // namespace
}  // namespace zt

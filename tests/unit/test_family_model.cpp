// The families' extra tensors in the model itself (model/llama.cpp): a Qwen3-shaped layer with
// q/k/v/o biases, per-head q/k norms and head_dim ≠ hidden/heads. Their gradients against
// transformers are the oracle's (oracle_hf_qwen3, oracle_hf_llama_attention_bias); here the paths
// the oracle does not take: the checkpointed layer's recompute gives the same bits as the stored
// activations, in fp32 and in bf16 storage, and bf16 storage stays near fp32; the same for a Gemma
// 2-shaped layer (sandwich norms, its own attention scale, soft-capped scores and logits; oracle:
// oracle_hf_gemma2) and a Gemma 3-shaped one (q/k norms, a window, two RoPE bases; oracle:
// oracle_hf_gemma3), and an OLMo 2-shaped one (norms after the attention and the MLP only, q/k
// norms over whole projections; oracle: oracle_hf_olmo2) and a Granite-shaped one (its four
// scalars; oracle: oracle_hf_granite). And the bias ops round a bf16 output
// once, as every op does.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/llama.h"
#include "support/family_shapes.h"
#include "support/gemma3_shape.h"
#include "util/bf16.h"
#include "util/memory.h"

namespace zt {
namespace {

ModelConfig qwen3_with_biases() {
  ModelConfig c = preset_config("tiny");  // D 64, H 4, Hkv 2, 2 layers
  c.explicit_head_dim = 24;
  c.qkv_bias = c.o_bias = c.qk_norm = true;
  c.validate();
  return c;
}

struct Pass {
  double loss = 0.0;
  std::vector<std::vector<float>> grads;  // per group
};

ModelConfig gemma2_shaped() {
  ModelConfig c = preset_config("tiny");
  c.use_gemma_math();  // untied: run_pass gives the head no embedding
  c.explicit_head_dim = 24;
  c.sandwich_norms = true;
  c.query_pre_attn_scalar = 20;
  c.attn_logit_softcap = 1.0f;
  c.final_logit_softcap = 2.0f;
  c.validate();
  return c;
}

// Gemma 3's: Gemma 2's layer without caps, with Gemma's q/k norms, a window of 5 keys (of 16) on
// its first layer, whose RoPE base is its own, and none on its second.
ModelConfig gemma3_shaped() {
  return gemma3_from_gemma2_shape(gemma2_shaped(), 5);
}

// OLMo 2's (k's norm narrower than q's: Hkv 2 of 4) and Granite's, with biases on all four
// projections.
ModelConfig with_biases(ModelConfig c) {
  c.qkv_bias = c.o_bias = true;
  c.validate();
  return c;
}

// One micro-batch's forward and backward over every group, the parameters as the layout inits
// them, with biases ~ N(0, 0.1²), q/k norm weights ~ 1 + N(0, 0.1²) and Gemma's norm weights
// ~ N(0, 0.1²).
Pass run_pass(const ModelConfig& c, const ActivationCheckpointing& ac, DType storage) {
  auto be = make_cpu_backend();
  MemoryTracker memory;
  const int64_t B = 2, T = 16;
  LlamaModel model(c, *be, memory, B, T, ac, 0, storage);
  const ParamLayout& layout = model.layout();
  std::mt19937 gen(5);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  std::vector<std::vector<float>> params;
  Pass pass;
  for (const GroupInfo& g : layout.groups()) {
    params.emplace_back(static_cast<size_t>(g.numel));
    pass.grads.emplace_back(static_cast<size_t>(g.numel), 0.0f);
    for (int ti : g.tensors) {
      const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
      float* dst = params.back().data() + t.offset;
      init_tensor_range(c, t, 11, 0, t.numel, dst);
      const bool qk_norm = t.role == TensorRole::kQNorm || t.role == TensorRole::kKNorm;
      const bool gemma_norm = c.is_gemma() && t.shape.size() == 1;
      if (t.is_bias() || qk_norm || gemma_norm)
        for (int64_t i = 0; i < t.numel; ++i) dst[i] += noise(gen);
    }
  }
  std::vector<int32_t> inputs(B * T), targets(B * T);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab_size - 1));
  for (int64_t i = 0; i < B * T; ++i) inputs[i] = token(gen), targets[i] = token(gen);
  model.set_batch(inputs.data(), targets.data());
  const int G = layout.num_groups();
  const float scale = 1.0f / static_cast<float>(B * T);
  for (int g = 0; g < G; ++g) model.forward_group(g, params[g].data(), true, scale);
  for (int g = G - 1; g >= 0; --g) model.backward_group(g, params[g].data(), pass.grads[g].data());
  pass.loss = model.loss_sum();
  return pass;
}

double relative_error(const Pass& got, const Pass& want) {
  double diff = 0.0, norm = 0.0;
  for (size_t g = 0; g < want.grads.size(); ++g)
    for (size_t i = 0; i < want.grads[g].size(); ++i) {
      const double d = got.grads[g][i] - want.grads[g][i];
      diff += d * d;
      norm += static_cast<double>(want.grads[g][i]) * want.grads[g][i];
    }
  return std::sqrt(diff / norm);
}

void expect_recompute_gives_the_same_bits(const ModelConfig& c) {
  for (DType storage : {DType::kFloat32, DType::kBf16}) {
    SCOPED_TRACE(dtype_name(storage));
    const Pass stored = run_pass(c, {}, storage);
    const Pass recomputed = run_pass(c, {1, false}, storage);
    EXPECT_EQ(recomputed.loss, stored.loss);
    EXPECT_EQ(recomputed.grads, stored.grads);
    const Pass every_other = run_pass(c, {2, false}, storage);
    EXPECT_EQ(every_other.grads, stored.grads);
    const Pass selective = run_pass(c, {0, false, true}, storage);
    EXPECT_EQ(selective.loss, stored.loss);
    EXPECT_EQ(selective.grads, stored.grads);
  }
  // bf16 storage rounds each activation to 8 bits of mantissa: near fp32, not equal to it.
  const Pass f32 = run_pass(c, {}, DType::kFloat32), b16 = run_pass(c, {}, DType::kBf16);
  const double error = relative_error(b16, f32);
  EXPECT_GT(error, 0.0);
  EXPECT_LT(error, 5e-2);
  EXPECT_NEAR(b16.loss, f32.loss, 1e-2 * std::abs(f32.loss));
}

TEST(FamilyModel, CheckpointedRecomputeGivesTheSameBitsWithBiasesAndQkNorms) {
  expect_recompute_gives_the_same_bits(qwen3_with_biases());
}

TEST(FamilyModel, CheckpointedRecomputeGivesTheSameBitsWithGemma2SandwichNormsAndSoftCaps) {
  expect_recompute_gives_the_same_bits(gemma2_shaped());
}

TEST(FamilyModel, CheckpointedRecomputeGivesTheSameBitsWithGemma3QkNormsAndWindows) {
  expect_recompute_gives_the_same_bits(gemma3_shaped());
}

TEST(FamilyModel, CheckpointedRecomputeGivesTheSameBitsWithOlmo2PostNormsAndWholeQkNorms) {
  expect_recompute_gives_the_same_bits(olmo2_from_llama_shape(with_biases(preset_config("tiny"))));
}

TEST(FamilyModel, CheckpointedRecomputeGivesTheSameBitsWithGraniteScalars) {
  expect_recompute_gives_the_same_bits(
      granite_from_llama_shape(with_biases(preset_config("tiny"))));
}

TEST(FamilyModel, BiasOpsRoundABf16OutputOnce) {
  auto be = make_cpu_backend();
  const int64_t M = 7, N = 5;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> y32(M * N), b(N), dy32(M * N);
  std::vector<bf16_t> yb(M * N), dyb(M * N);
  for (int64_t i = 0; i < M * N; ++i) {
    yb[i] = float_to_bf16(dist(gen)), y32[i] = bf16_to_float(yb[i]);
    dyb[i] = float_to_bf16(dist(gen)), dy32[i] = bf16_to_float(dyb[i]);
  }
  for (float& x : b) x = dist(gen);
  be->bias_forward(y32.data(), b.data(), M, N);
  be->bias_forward(yb.data(), b.data(), M, N);
  for (int64_t i = 0; i < M * N; ++i) EXPECT_EQ(yb[i], float_to_bf16(y32[i])) << i;
  std::vector<float> db32(N, 1.0f), dbb(N, 1.0f);
  be->bias_backward(db32.data(), dy32.data(), M, N);
  be->bias_backward(dbb.data(), dyb.data(), M, N);
  EXPECT_EQ(dbb, db32);
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0.0;
    for (int64_t m = 0; m < M; ++m) sum += dy32[m * N + n];
    EXPECT_EQ(db32[n], 1.0f + static_cast<float>(sum)) << n;
  }
}

}  // namespace
}  // namespace zt

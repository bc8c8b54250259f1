// GradWrite::kAssign (backend/backend.h, model/llama.h): a micro-batch's backward overwrites its
// gradient buffers instead of adding to zeroed ones, so that the engine zeroes no gradient
// buffer for a step. The reference is the backward that adds (kAdd) into zeros: kAssign into
// buffers full of NaN must give the same values everywhere in the groups' ranges, for every
// kind of gradient (the GEMMs', the norms', the biases', the embedding's scatter, the head's
// chunks, LoRA's adapters with and without dropout) and for frozen tensors (zeros).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/trainable.h"
#include "support/family_shapes.h"
#include "util/memory.h"

namespace zt {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Equal values element by element (−0 equals +0: backend.h's GradWrite), NaN never equal.
void expect_same_values(const std::vector<float>& want, const std::vector<float>& got,
                        const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  int64_t differing = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == got[i]) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++differing;
  }
  EXPECT_EQ(differing, 0) << what << ": first at " << first << " (want "
                          << (first >= 0 ? want[static_cast<size_t>(first)] : 0.0f) << ", got "
                          << (first >= 0 ? got[static_cast<size_t>(first)] : 0.0f) << ")";
}

TEST(GradWrite, WeightGradientAssignIsWhatAddLeavesInZeros) {
  auto be = make_cpu_backend();
  const int64_t M = 37, N = 19, K = 23;  // ragged against every tile
  std::vector<float> x(M * K), dy(M * N), dy2(M * N);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < dy.size(); ++i) {
    dy[i] = std::cos(0.11f * static_cast<float>(i));
    dy2[i] = std::sin(0.05f * static_cast<float>(i) + 1.0f);
  }
  std::vector<float> added(N * K, 0.0f), assigned(N * K, kNaN);
  be->matmul_backward(TensorView(), added.data(), dy.data(), x.data(), ConstTensorView(), M, N, K,
                      false, GradWrite::kAdd);
  be->matmul_backward(TensorView(), assigned.data(), dy.data(), x.data(), ConstTensorView(), M, N,
                      K, false, GradWrite::kAssign);
  expect_same_values(added, assigned, "matmul_backward dw");
  // kAdd then adds onto what kAssign wrote.
  std::vector<float> twice = added;
  be->matmul_backward(TensorView(), twice.data(), dy.data(), x.data(), ConstTensorView(), M, N, K,
                      false, GradWrite::kAdd);
  for (size_t i = 0; i < twice.size(); ++i) EXPECT_EQ(twice[i], added[i] + added[i]) << i;

  // The batch: each trainable weight's product assigned, a null one (frozen) skipped.
  std::vector<float> batch0(N * K, kNaN), batch1(N * K, kNaN), alone1(N * K, 0.0f);
  float* dws[] = {batch0.data(), nullptr, batch1.data()};
  const ConstTensorView dys[] = {dy.data(), dy.data(), dy2.data()};
  be->matmul_weight_grad_batch(dws, dys, x.data(), 3, M, N, K, GradWrite::kAssign);
  be->matmul_backward(TensorView(), alone1.data(), dy2.data(), x.data(), ConstTensorView(), M, N, K,
                      false, GradWrite::kAdd);
  expect_same_values(added, batch0, "matmul_weight_grad_batch dw[0]");
  expect_same_values(alone1, batch1, "matmul_weight_grad_batch dw[2]");
}

struct BackwardCase {
  std::string name;
  ModelConfig config;
  std::vector<std::string> trainable, freeze;  // --trainable / --freeze patterns
  int64_t head_chunk_rows = 0;
  ActivationCheckpointing ac = {};
};

// Backwards of training micro-batches as the ZeRO engine runs them at stages 0/1: unit by unit
// from the head down to the lowest that trains, a layer's adapters with it, micro-batch m written
// with writes[m] into one accumulator per group. Tied, the embedding's gradient collects the
// head's share in a buffer of its own, zeroed for each micro-batch, and is copied (kAssign) or
// added into the accumulator, as the engine does: group 0 of a tied model is the same in both
// runs by construction, and a tied case checks the head group's kAssign and that the tied head's
// product adds. Every buffer first holds `fill`; groups that do not train keep it.
std::vector<std::vector<float>> accumulated_gradients(const BackwardCase& s,
                                                      const std::vector<GradWrite>& writes,
                                                      float fill) {
  auto be = make_cpu_backend();
  MemoryTracker memory;
  const int64_t B = 2, T = 12;
  LlamaModel model(s.config, *be, memory, B, T, s.ac, s.head_chunk_rows);
  const ParamLayout& layout = model.layout();
  const TrainableSet trainable = TrainableSet::from_patterns(layout, s.trainable, s.freeze);
  model.set_trainable(trainable);
  model.set_lora_dropout_seed(11);
  const int G = layout.num_groups(), U = layout.num_compute_units(), head = layout.head_group();
  std::vector<std::vector<float>> params(static_cast<size_t>(G)), grads(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) {
    params[g].assign(static_cast<size_t>(layout.groups()[g].numel), 0.0f);
    for (int t : layout.groups()[g].tensors) {
      const TensorInfo& info = layout.tensors()[static_cast<size_t>(t)];
      float* p = params[g].data() + info.offset;
      init_tensor_range(s.config, info, 7, 0, info.numel, p);
      if (info.role == TensorRole::kLoraB)  // not PEFT's zeros: every adapter gradient non-zero
        for (int64_t i = 0; i < info.numel; ++i) p[i] = 0.02f * std::sin(static_cast<float>(i));
    }
    grads[g].assign(params[g].size(), fill);
  }
  const bool tied = layout.tied_embeddings();
  auto adapter_group = [&](int u) { return u > 0 && u < head ? layout.adapter_group(u - 1) : -1; };
  auto view = [&](int g) { return g < 0 ? ConstTensorView() : ConstTensorView(params[g].data()); };
  std::vector<float> embedding_grads(params[0].size(), fill);
  float* tied_grads = tied && trainable.group_trains(layout, 0) ? embedding_grads.data() : nullptr;
  for (size_t m = 0; m < writes.size(); ++m) {
    std::vector<int32_t> tokens(2 * B * T);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<int32_t>((i * 37 + 5 + 11 * m) % s.config.vocab_size);
    model.set_batch(tokens.data(), tokens.data() + B * T);
    model.set_batch_position(static_cast<int64_t>(m) * B * T);
    for (int u = 0; u < U; ++u)
      model.forward_group(u, params[u].data(), true, 1.0f / static_cast<float>(B * T),
                          u == head && tied ? view(0) : ConstTensorView(), view(adapter_group(u)));
    std::fill(embedding_grads.begin(), embedding_grads.end(), 0.0f);
    for (int u = U - 1; u >= trainable.lowest_backward_group(layout); --u) {
      const int a = adapter_group(u);
      const bool adapters_train = a >= 0 && trainable.group_trains(layout, a);
      float* own = !adapters_train && trainable.group_trains(layout, u) ? grads[u].data() : nullptr;
      if (tied && u == 0) {
        model.backward_group(0, params[0].data(), tied_grads, {}, nullptr, {}, nullptr,
                             GradWrite::kAdd);
        for (size_t i = 0; own && i < embedding_grads.size(); ++i)
          own[i] =
              writes[m] == GradWrite::kAssign ? embedding_grads[i] : own[i] + embedding_grads[i];
        continue;
      }
      model.backward_group(u, params[u].data(), own,
                           u == head && tied ? view(0) : ConstTensorView(),
                           u == head ? tied_grads : nullptr, view(a),
                           adapters_train ? grads[a].data() : nullptr, writes[m]);
    }
  }
  return grads;
}

ModelConfig with_lora(ModelConfig c, const std::vector<std::string>& targets, double dropout) {
  LoraSpec lora;
  lora.rank = 4;
  lora.set_targets(targets, "test");
  lora.dropout = dropout;
  c.set_lora(lora);
  return c;
}

std::vector<BackwardCase> backward_cases() {
  const ModelConfig tiny = preset_config("tiny");  // D 64, H 4, Hkv 2, 2 layers
  ModelConfig tied = tiny;
  tied.tie_word_embeddings = true;
  ModelConfig qwen3 = tiny;  // q/k/v/o biases and per-head q/k norms: q's product not batched
  qwen3.qkv_bias = qwen3.o_bias = qwen3.qk_norm = true;
  ModelConfig no_gqa = tiny;  // q joins k and v's batch
  no_gqa.num_kv_heads = no_gqa.num_heads;
  ModelConfig no_gqa_biases = no_gqa;
  no_gqa_biases.qkv_bias = no_gqa_biases.o_bias = true;
  ModelConfig phi3 = tiny;  // fused qkv_proj and gate_up_proj: one adapter on each
  phi3.fused_projections = true;
  // Norms of the attention's and the MLP's outputs beside the pre-norms (GLM-4's); OLMo 2's
  // output norms alone, with q/k norms over a token's whole projection.
  const ModelConfig glm4 = glm4_from_llama_shape(tiny), olmo2 = olmo2_from_llama_shape(tiny);
  const ActivationCheckpointing every_layer{1, false, false}, selective{0, false, true};
  return {
      {"every tensor, the head in 3 chunks", tiny, {}, {}, 8},
      {"tied embeddings", tied, {}, {}, 8},
      {"tied embeddings, the embedding frozen", tied, {}, {"embed_tokens"}, 0},
      {"biases and q/k norms", qwen3, {}, {}, 0},
      {"sandwich norms (GLM-4's)", glm4, {}, {}, 0},
      {"output norms and whole-projection q/k norms (OLMo 2's)", olmo2, {}, {}, 0},
      {"q, k and v in one batch", no_gqa, {}, {}, 0},
      {"q, k and v in one batch, with biases", no_gqa_biases, {}, {}, 0},
      {"frozen tensors inside trained groups", tiny, {}, {"layers\\.1\\.mlp", "norm", "q_proj"}, 0},
      {"the head alone", tiny, {"lm_head"}, {}, 0},
      {"full activation checkpointing", tiny, {}, {}, 0, every_layer},
      {"selective activation checkpointing, q/k norms", qwen3, {}, {}, 0, selective},
      {"LoRA q,v", with_lora(tiny, {"q_proj", "v_proj"}, 0.0), {}, {}, 0},
      {"LoRA all-linear with dropout and lm_head",
       with_lora(tiny, {"all-linear"}, 0.1),
       {"(^|\\.)lm_head\\.weight$"},
       {},
       8},
      {"LoRA, one adapter frozen",
       with_lora(tiny, {"q_proj", "v_proj"}, 0.0),
       {},
       {"0.*lora_B"},
       0},
      {"LoRA with dropout, one A frozen",
       with_lora(tiny, {"q_proj", "down_proj"}, 0.1),
       {},
       {"layers\\.1\\..*down_proj\\.lora_A"},
       0},
      {"LoRA on Phi-3's fused projections, with dropout",
       with_lora(phi3, {"all-linear"}, 0.1),
       {},
       {},
       0},
      {"LoRA on Phi-3's fused projections, one B frozen",
       with_lora(phi3, {"qkv_proj", "gate_up_proj"}, 0.0),
       {},
       {"1.*qkv_proj\\.lora_B"},
       0},
      {"LoRA on a tied model, the embedding training",
       with_lora(tied, {"all-linear"}, 0.0),
       {"embed_tokens"},
       {},
       0},
  };
}

// The engine's micro-batches at stages 0/1: the first written over NaN, the second added, against
// both added into zeros.
TEST(GradWrite, AssignedMicroBatchGradientsAreTheAddedOnesAndFrozenRangesZero) {
  for (const BackwardCase& s : backward_cases()) {
    SCOPED_TRACE(s.name);
    const auto added = accumulated_gradients(s, {GradWrite::kAdd, GradWrite::kAdd}, 0.0f);
    const auto assigned = accumulated_gradients(s, {GradWrite::kAssign, GradWrite::kAdd}, kNaN);
    const ParamLayout layout(s.config);
    const TrainableSet trainable = TrainableSet::from_patterns(layout, s.trainable, s.freeze);
    int compared = 0;
    for (int g = 0; g < layout.num_groups(); ++g) {
      if (!trainable.group_trains(layout, g)) continue;
      expect_same_values(added[g], assigned[g], "group " + layout.groups()[g].name);
      ++compared;
    }
    EXPECT_GT(compared, 0);
  }
}

}  // namespace
}  // namespace zt

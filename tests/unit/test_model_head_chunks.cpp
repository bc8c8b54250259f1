// The head in row chunks (model/llama.h, head_rows_per_chunk): a model whose head computes its
// logits a few rows at a time trains exactly like one that holds them all. The single-chunk
// model is the one the oracle tests check against PyTorch, so this carries that check over.
//   - losses, and every gradient below the head (the final norm, the layers, the embedding),
//     bitwise: chunks are whole GEMM row tiles, so each row's logits, dlogits and dxf are the
//     products of the whole batch (CpuBackendDeterminism.MatmulRowsDoNotDependOnTheBatch);
//   - lm_head's gradient Σ_m dlogits_mᵀ·xf_m is the one sum whose association changes (per chunk,
//     then across chunks): |δ| ≤ 2γ_M·Σ_m |dlogits_m|·|xf_m| elementwise, γ_M = M·u/(1 − M·u),
//     u = 2⁻²⁴ (two fp32 sums of M terms, each within γ_M of the exact one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/llama.h"
#include "util/error.h"
#include "util/memory.h"

namespace zt {
namespace {

struct HeadRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // per group
  int64_t activation_bytes = 0;
};

// The tiny preset's parameters from `seed`, per group, and 2·M tokens (inputs, then targets).
std::vector<std::vector<float>> initial_params(const ModelConfig& c, uint64_t seed) {
  const ParamLayout layout(c);
  std::vector<std::vector<float>> params(layout.num_groups());
  for (int g = 0; g < layout.num_groups(); ++g) {
    params[g].assign(layout.groups()[g].numel, 0.0f);
    for (int t : layout.groups()[g].tensors) {
      const TensorInfo& info = layout.tensors()[t];
      init_tensor_range(c, info, seed, 0, info.numel, params[g].data() + info.offset);
    }
  }
  return params;
}

std::vector<int32_t> cycling_tokens(const ModelConfig& c, int64_t M, int64_t stride,
                                    int64_t offset) {
  std::vector<int32_t> tokens(2 * M);
  for (int64_t i = 0; i < 2 * M; ++i)
    tokens[i] = static_cast<int32_t>((i * stride + offset) % c.vocab_size);
  return tokens;
}

// One training micro-batch: forward of every group, backward in reverse.
HeadRun train_micro_batch(const ModelConfig& c, int64_t B, int64_t T, int64_t head_chunk_rows,
                          const std::vector<std::vector<float>>& params,
                          const std::vector<int32_t>& tokens) {
  auto backend = make_cpu_backend();
  MemoryTracker memory;
  LlamaModel model(c, *backend, memory, B, T, {}, head_chunk_rows);
  const int64_t M = B * T;
  model.set_batch(tokens.data(), tokens.data() + M);
  const int groups = model.layout().num_groups();
  for (int g = 0; g < groups; ++g)
    model.forward_group(g, params[g].data(), true, 1.0f / static_cast<float>(M));
  HeadRun run;
  run.grads.resize(groups);
  for (int g = groups - 1; g >= 0; --g) {
    run.grads[g].assign(params[g].size(), 0.0f);
    model.backward_group(g, params[g].data(), run.grads[g].data());
  }
  run.losses.resize(M);
  std::memcpy(run.losses.data(), model.token_losses(), M * sizeof(float));
  run.activation_bytes = static_cast<int64_t>(memory.current(MemCategory::kActivations));
  return run;
}

TEST(ModelHeadChunks, RowsPerChunkDependOnlyOnRowsAndVocab) {
  EXPECT_EQ(head_rows_per_chunk(64, 256), 64);           // small: one chunk
  EXPECT_EQ(head_rows_per_chunk(1 << 17, 256), 65536);   // 2^24 logits: more rows than the target
  EXPECT_EQ(head_rows_per_chunk(1 << 17, 20000), 1024);  // 2^24 / 20000 = 838: the target
  EXPECT_EQ(head_rows_per_chunk(8192, 32000), 1024);     // 1b, B=4, T=2048: 8 chunks
  EXPECT_EQ(head_rows_per_chunk(8192, 128256), 1024);    // Llama-3's vocabulary: 8, not 64
  EXPECT_EQ(head_rows_per_chunk(8192, 262144), 1024);    // Gemma 3's: 2^28 logits, the most
  EXPECT_EQ(head_rows_per_chunk(8192, 300000), 768);     // past it: 2^28 / V = 894, rounded down
  EXPECT_EQ(head_rows_per_chunk(8192, int64_t{1} << 30), 128);  // past the budget: one GEMM tile
  EXPECT_EQ(head_rows_per_chunk(1000, 128256), 1000);           // at most the micro-batch's rows
  EXPECT_THROW(head_rows_per_chunk(0, 10), Error);
}

TEST(ModelHeadChunks, ChunkedHeadTrainsLikeTheWholeHead) {
  const ModelConfig c = preset_config("tiny");
  const int64_t B = 2, T = 100, M = B * T;  // 200 rows: chunks of 128 leave a ragged last one
  const ParamLayout layout(c);
  const std::vector<std::vector<float>> params = initial_params(c, 7);
  const std::vector<int32_t> tokens = cycling_tokens(c, M, 37, 11);

  const HeadRun whole = train_micro_batch(c, B, T, M, params, tokens);
  const HeadRun chunked = train_micro_batch(c, B, T, kHeadChunkRowMultiple, params, tokens);
  EXPECT_EQ(std::memcmp(whole.losses.data(), chunked.losses.data(), M * sizeof(float)), 0);
  const int head = layout.head_group();
  for (int g = 0; g < head; ++g)
    EXPECT_EQ(std::memcmp(whole.grads[g].data(), chunked.grads[g].data(),
                          whole.grads[g].size() * sizeof(float)),
              0)
        << layout.groups()[g].name;
  // The head group: the final norm bitwise, lm_head within 2γ_M·Σ_m |dlogits_mv|·|xf_md|. Each
  // |dlogits_mv| ≤ grad_scale = 1/M (softmax − onehot, scaled), and |xf_md| = |x_md·rstd_m·g_d| ≤
  // |g_d|·√D (a row times its rstd has mean square ≤ 1), so the sum is ≤ max|g|·√D.
  const TensorInfo& lm = layout.tensor(TensorRole::kLmHead);
  const TensorInfo& norm = layout.tensor(TensorRole::kFinalNorm);
  EXPECT_EQ(std::memcmp(whole.grads[head].data() + norm.offset,
                        chunked.grads[head].data() + norm.offset, norm.numel * sizeof(float)),
            0);
  const double u = std::ldexp(1.0, -24), gamma = M * u / (1 - M * u);
  double max_gain = 0;
  for (int64_t d = 0; d < c.hidden_size; ++d)
    max_gain = std::max(max_gain, std::fabs(static_cast<double>(params[head][norm.offset + d])));
  const double bound = 2 * gamma * max_gain * std::sqrt(static_cast<double>(c.hidden_size));
  double worst = 0;
  for (int64_t i = 0; i < lm.numel; ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(whole.grads[head][lm.offset + i]) -
                                      chunked.grads[head][lm.offset + i]));
  EXPECT_LE(worst, bound);
  // The chunked model holds 128 rows of logits instead of 200.
  EXPECT_EQ(whole.activation_bytes - chunked.activation_bytes,
            static_cast<int64_t>((M - kHeadChunkRowMultiple) * c.vocab_size * sizeof(float)));
}

// Training fuses the head's linear and cross-entropy with their backward: the training forward
// computes no logits (a sentinel in the logits buffer survives it), the losses cannot be read
// until the head's backward, which writes every chunk's (over NaN), bitwise the evaluation
// forward's; the logits of a training pass are not handed out.
TEST(ModelHeadChunks, TrainingRunsTheHeadsChunksInItsBackwardAlone) {
  const ModelConfig c = preset_config("tiny");
  const int64_t B = 2, T = 100, M = B * T;
  const ParamLayout layout(c);
  const std::vector<std::vector<float>> params = initial_params(c, 5);
  const std::vector<int32_t> tokens = cycling_tokens(c, M, 29, 3);
  auto backend = make_cpu_backend();
  MemoryTracker memory;
  LlamaModel model(c, *backend, memory, B, T, {}, kHeadChunkRowMultiple);
  ASSERT_EQ(model.head_chunk_rows(), kHeadChunkRowMultiple);  // two chunks, the last ragged
  model.set_batch(tokens.data(), tokens.data() + M);
  const int G = layout.num_groups(), head = layout.head_group();
  for (int g = 0; g < G; ++g) model.forward_group(g, params[g].data(), false, 1.0f);
  const std::vector<float> evaluated(model.token_losses(), model.token_losses() + M);

  const int64_t logits_n = kHeadChunkRowMultiple * c.vocab_size;
  const std::vector<float> sentinel(static_cast<size_t>(logits_n), -3.5f);
  const TensorView logits = model.activation_tensors().logits;
  backend->device_memory().to_device(logits.data, sentinel.data(), logits_n * sizeof(float));
  for (int g = 0; g < G; ++g)
    model.forward_group(g, params[g].data(), true, 1.0f / static_cast<float>(M));
  EXPECT_EQ(widened_to_host(backend->device_memory(), logits, logits_n), sentinel);
  EXPECT_THROW(model.loss_sum(), Error);
  EXPECT_THROW(model.token_losses(), Error);
  const std::vector<float> nan(static_cast<size_t>(M), std::nanf(""));
  backend->device_memory().to_device(model.activation_tensors().losses, nan.data(),
                                     M * sizeof(float));
  std::vector<std::vector<float>> grads(static_cast<size_t>(G));
  for (int g = G - 1; g >= 0; --g) {
    grads[g].assign(params[g].size(), 0.0f);
    model.backward_group(g, params[g].data(), grads[g].data());
  }
  const std::vector<float> trained(model.token_losses(), model.token_losses() + M);
  EXPECT_EQ(std::memcmp(trained.data(), evaluated.data(), M * sizeof(float)), 0);
  // A second head backward has no training forward to finish.
  EXPECT_THROW(model.backward_group(head, params[head].data(), grads[head].data()), Error);
}

// Logits are handed out after an evaluation forward of a one-chunk head only: a training pass
// leaves dlogits in their buffer.
TEST(ModelHeadChunks, LogitsNeedTheWholeHeadAndAnEvaluation) {
  const ModelConfig c = preset_config("tiny");
  auto backend = make_cpu_backend();
  MemoryTracker memory;
  LlamaModel chunked(c, *backend, memory, 1, 8, {}, 3);
  EXPECT_EQ(chunked.head_chunk_rows(), 3);
  EXPECT_THROW(chunked.logits(), Error);
  LlamaModel whole(c, *backend, memory, 1, 8, {}, 100);
  EXPECT_EQ(whole.head_chunk_rows(), 8);  // at most the micro-batch's rows
  const std::vector<std::vector<float>> params = initial_params(c, 3);
  const std::vector<int32_t> tokens = cycling_tokens(c, 8, 5, 1);
  whole.set_batch(tokens.data(), tokens.data() + 8);
  const int G = whole.layout().num_groups();
  for (int g = 0; g < G; ++g) whole.forward_group(g, params[g].data(), true, 0.125f);
  std::vector<std::vector<float>> grads(static_cast<size_t>(G));
  for (int g = G - 1; g >= 0; --g) {
    grads[g].assign(params[g].size(), 0.0f);
    whole.backward_group(g, params[g].data(), grads[g].data());
  }
  EXPECT_THROW(whole.logits(), Error);
  for (int g = 0; g < G; ++g) whole.forward_group(g, params[g].data(), false, 1.0f);
  const std::vector<float> logits = whole.logits();
  ASSERT_EQ(logits.size(), static_cast<size_t>(8 * c.vocab_size));
}

}  // namespace
}  // namespace zt

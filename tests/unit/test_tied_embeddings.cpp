// Tied embeddings (tie_word_embeddings): one parameter, the embedding table, used by the lookup
// and by the head. Checked against the untied model whose lm_head holds the same values (the
// untied model's math is checked against PyTorch by the oracle): the same logits and loss, bit
// for bit, and a gradient equal to the sum of the untied embedding's and lm_head's gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/llama.h"
#include "util/memory.h"

namespace zt {
namespace {

struct Pass {
  double loss = 0;
  std::vector<std::vector<float>> grads;  // per group
};

// One forward and backward of `c` on a fixed batch; params[g] are the groups' values.
Pass forward_backward(const ModelConfig& c, const std::vector<std::vector<float>>& params) {
  auto be = make_cpu_backend();
  MemoryTracker memory;
  const int64_t B = 2, T = 12;
  LlamaModel model(c, *be, memory, B, T);
  const ParamLayout& layout = model.layout();
  const int G = layout.num_groups(), head = layout.head_group();
  std::vector<int32_t> tokens(2 * B * T);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 37 + 5) % c.vocab_size);
  model.set_batch(tokens.data(), tokens.data() + B * T);
  const bool tied = layout.tied_embeddings();
  const float* embedding = tied ? params[0].data() : nullptr;
  for (int g = 0; g < G; ++g)
    model.forward_group(g, params[g].data(), true, 1.0f / static_cast<float>(B * T),
                        g == head ? embedding : nullptr);
  Pass out;
  out.grads.resize(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) out.grads[g].assign(params[g].size(), 0.0f);
  for (int g = G - 1; g >= 0; --g)
    model.backward_group(g, params[g].data(), out.grads[g].data(), g == head ? embedding : nullptr,
                         g == head && tied ? out.grads[0].data() : nullptr);
  out.loss = model.loss_sum();
  return out;
}

TEST(TiedEmbeddings, OneParameterWithBothUsesGradients) {
  ModelConfig untied = preset_config("tiny");
  ModelConfig tied = untied;
  tied.tie_word_embeddings = true;
  const ParamLayout lu(untied), lt(tied);
  // The tied layout has no lm_head: the head group is the final norm alone.
  EXPECT_EQ(lt.find("lm_head.weight"), -1);
  EXPECT_EQ(lt.total_numel(), lu.total_numel() - untied.vocab_size * untied.hidden_size);
  EXPECT_EQ(lt.tensor(TensorRole::kLmHead).name, "model.embed_tokens.weight");

  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<std::vector<float>> pu(static_cast<size_t>(lu.num_groups()));
  for (int g = 0; g < lu.num_groups(); ++g) {
    pu[g].resize(static_cast<size_t>(lu.groups()[g].numel));
    for (float& v : pu[g]) v = normal(rng);
  }
  std::vector<std::vector<float>> pt = pu;
  const TensorInfo& lm = lu.tensor(TensorRole::kLmHead);
  const int head = lu.head_group();
  // untied: lm_head := embedding, so both models compute the same function.
  std::copy(pu[0].begin(), pu[0].end(), pu[head].begin() + lm.offset);
  pt[head].resize(static_cast<size_t>(lt.groups()[head].numel));  // drops the lm_head slot

  const Pass a = forward_backward(untied, pu), b = forward_backward(tied, pt);
  EXPECT_EQ(a.loss, b.loss);
  for (int g = 1; g < lu.num_groups(); ++g)
    for (size_t i = 0; i < b.grads[g].size(); ++i)
      ASSERT_EQ(a.grads[g][i], b.grads[g][i]) << "group " << g << " element " << i;
  // dE(tied) = dE_lookup + dW_head, associated differently: (dW + e1) + e2 + ... against
  // (e1 + e2 + ...) + dW, with k ≤ B·T + 1 terms. Each is within k·u·Σ|terms| of the exact sum.
  // Σ|terms| is not visible here; it is taken as 4·(|dE_lookup| + |dW|), a margin of 4 for
  // cancellation among the lookup's terms, so the bound is 2·k·u·4·(|dE_lookup| + |dW|).
  const double u = std::ldexp(1.0, -24);
  const int64_t k = 2 * 12 + 1;
  int64_t differing = 0;
  for (size_t i = 0; i < b.grads[0].size(); ++i) {
    const double lookup = a.grads[0][i], head_part = a.grads[head][lm.offset + i];
    const double expect = lookup + head_part;
    const double bound = 2.0 * k * u * (std::fabs(lookup) + std::fabs(head_part)) * 4.0 + 1e-30;
    ASSERT_LE(std::fabs(b.grads[0][i] - expect), bound) << "embedding element " << i;
    differing += b.grads[0][i] != a.grads[0][i];
  }
  // The head's share really arrived: most elements differ from the lookup's gradient alone.
  EXPECT_GT(differing, static_cast<int64_t>(b.grads[0].size() / 2));
}

}  // namespace
}  // namespace zt

// CPU backend: every backward against central finite differences of its forward, on the scalar
// objective L = Σ r·y with random r. Parameter gradients are pre-filled to check that they are
// accumulated (+=); "=" outputs are pre-filled with garbage to check that they are overwritten.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "test_cpu_backend_support.h"
#include "util/ignored_target.h"

namespace zt {
namespace {

using test::expect_gradient_matches;
using test::random_normal;
using test::weighted_sum;

// Linear ops are checked with a large step (their finite differences are exact up to rounding)
// and a tight tolerance; smooth non-linear ones with a small step and a looser tolerance.
constexpr float kLinearStep = 0.5f;
constexpr double kLinearTol = 1e-4;
constexpr float kSmoothStep = 1e-2f;
constexpr double kSmoothTol = 5e-3;

std::vector<float> minus(const std::vector<float>& a, float b) {
  std::vector<float> out(a);
  for (float& x : out) x -= b;
  return out;
}

TEST(CpuBackendGrad, Matmul) {
  auto be = make_cpu_backend();
  const int64_t M = 5, N = 4, K = 6;
  auto x = random_normal(M * K, 1);
  auto w = random_normal(N * K, 2);
  const auto r = random_normal(M * N, 3);
  std::vector<float> y(M * N);
  auto objective = [&] {
    be->matmul_forward(y.data(), x.data(), w.data(), M, N, K);
    return weighted_sum(r, y);
  };
  std::vector<float> dx(M * K, 123.0f), dw(N * K, 0.25f);
  be->matmul_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), M, N, K, false,
                      GradWrite::kAdd);
  expect_gradient_matches("dx", x, dx, objective, kLinearStep, kLinearTol);
  expect_gradient_matches("dw", w, minus(dw, 0.25f), objective, kLinearStep, kLinearTol);

  // accumulate_dx adds onto dx; a null dw is skipped.
  std::vector<float> dx_acc(M * K, 1.0f);
  be->matmul_backward(dx_acc.data(), nullptr, r.data(), x.data(), w.data(), M, N, K, true,
                      GradWrite::kAdd);
  expect_gradient_matches("dx (+=)", x, minus(dx_acc, 1.0f), objective, kLinearStep, kLinearTol);
}

TEST(CpuBackendGrad, RmsNorm) {
  auto be = make_cpu_backend();
  const int64_t M = 3, D = 8;
  const float eps = 1e-5f;
  auto x = random_normal(M * D, 4);
  auto g = random_normal(D, 5, 0.3f);
  for (float& v : g) v += 1.0f;
  const auto r = random_normal(M * D, 6);
  std::vector<float> y(M * D), rstd(M);
  auto objective = [&] {
    be->rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), M, D, eps);
    return weighted_sum(r, y);
  };
  objective();
  std::vector<float> dx(M * D, 0.5f), dg(D, -1.0f);
  be->rmsnorm_backward(dx.data(), dg.data(), r.data(), x.data(), g.data(), rstd.data(), M, D);
  expect_gradient_matches("dx", x, minus(dx, 0.5f), objective, kSmoothStep, kSmoothTol);
  expect_gradient_matches("dg", g, minus(dg, -1.0f), objective, kSmoothStep, kSmoothTol);
}

// Gemma's norm, y = x·rstd·(1 + g): the same values as the plain norm of the weight 1 + g (one
// fp32 addition either way), and gradients that match finite differences, dg included.
TEST(CpuBackendGrad, RmsNormWithGemmaOffsetScalesByOnePlusTheWeight) {
  auto be = make_cpu_backend();
  const int64_t M = 3, D = 8;
  const float eps = 1e-6f, offset = 1.0f;
  auto x = random_normal(M * D, 4);
  auto g = random_normal(D, 5, 0.3f);
  std::vector<float> one_plus_g(g.size());
  for (size_t d = 0; d < g.size(); ++d) one_plus_g[d] = 1.0f + g[d];
  std::vector<float> plain(M * D), plain_rstd(M);
  be->rmsnorm_forward(plain.data(), plain_rstd.data(), x.data(), one_plus_g.data(), M, D, eps);
  const auto r = random_normal(M * D, 6);
  std::vector<float> y(M * D), rstd(M);
  auto objective = [&] {
    be->rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), M, D, eps, offset);
    return weighted_sum(r, y);
  };
  objective();
  EXPECT_EQ(y, plain);
  EXPECT_EQ(rstd, plain_rstd);
  std::vector<float> dx(M * D, 0.5f), dg(D, -1.0f);
  be->rmsnorm_backward(dx.data(), dg.data(), r.data(), x.data(), g.data(), rstd.data(), M, D,
                       offset);
  expect_gradient_matches("dx", x, minus(dx, 0.5f), objective, kSmoothStep, kSmoothTol);
  expect_gradient_matches("dg", g, minus(dg, -1.0f), objective, kSmoothStep, kSmoothTol);
}

// The whole head, and (Phi-4-mini's partial_rotary_factor) its leading 6 or 2 elements, paired
// as Llama pairs them and as GLM does (adjacent elements).
TEST(CpuBackendGrad, Rope) {
  auto be = make_cpu_backend();
  const int64_t B = 2, T = 5, H = 3, hd = 8;
  for (const int64_t rotated : {0, 6, 2})
    for (const bool interleaved : {false, true}) {
      SCOPED_TRACE("rotary_dims " + std::to_string(rotated) + (interleaved ? " interleaved" : ""));
      RopeSpec rope = RopeSpec::unscaled(10.0f);  // small base: every pair rotates noticeably
      rope.rotary_dims = rotated;
      rope.interleaved = interleaved;
      auto x = random_normal(B * T * H * hd, 7);
      const auto r = random_normal(x.size(), 8);
      std::vector<float> y(x.size());
      auto objective = [&] {
        y = x;
        be->rope_forward(y.data(), B, T, H, hd, rope);
        return weighted_sum(r, y);
      };
      std::vector<float> dx(r);
      be->rope_backward(dx.data(), B, T, H, hd, rope);
      expect_gradient_matches("dx", x, dx, objective, kLinearStep, kLinearTol);
    }
}

// A partial rotation is the rotation of a head of its r elements (inv_freq over r, as
// transformers' rope functions take dim = int(head_dim · factor)) on each head's leading r, and
// leaves the rest as they were, bit for bit.
TEST(CpuBackendGrad, PartialRopeRotatesTheLeadingElementsAsAHeadOfTheirCount) {
  auto be = make_cpu_backend();
  const int64_t B = 2, T = 9, H = 3, hd = 16, r = 12;
  RopeSpec partial = RopeSpec::unscaled(10.0f);
  partial.rotary_dims = r;
  const auto x = random_normal(B * T * H * hd, 21);
  std::vector<float> head(B * T * H * r);
  for (int64_t row = 0; row < B * T * H; ++row)
    std::copy_n(x.begin() + row * hd, r, head.begin() + row * r);
  for (const bool forward : {true, false}) {
    std::vector<float> y = x, want = head;
    if (forward) {
      be->rope_forward(y.data(), B, T, H, hd, partial);
      be->rope_forward(want.data(), B, T, H, r, RopeSpec::unscaled(10.0f));
    } else {
      be->rope_backward(y.data(), B, T, H, hd, partial);
      be->rope_backward(want.data(), B, T, H, r, RopeSpec::unscaled(10.0f));
    }
    for (int64_t row = 0; row < B * T * H; ++row)
      for (int64_t e = 0; e < hd; ++e)
        ASSERT_EQ(y[row * hd + e], e < r ? want[row * r + e] : x[row * hd + e])
            << (forward ? "forward" : "backward") << " row " << row << " element " << e;
  }
}

// GLM's interleaved rotation is Llama's on a head whose rotated elements are reordered evens
// first (element 2i to i, 2i + 1 to i + r/2): the same pairs turned by the same angles, so the
// same bits once put back; the elements past r pass through.
TEST(CpuBackendGrad, InterleavedRopeIsTheHalfSplitRotationOfTheReorderedHead) {
  auto be = make_cpu_backend();
  const int64_t B = 2, T = 7, H = 3, hd = 12;
  for (const int64_t r : {int64_t{6}, hd}) {
    SCOPED_TRACE("rotated " + std::to_string(r));
    RopeSpec interleaved = RopeSpec::unscaled(10.0f), split = interleaved;
    interleaved.rotary_dims = split.rotary_dims = r;
    interleaved.interleaved = true;
    const auto x = random_normal(B * T * H * hd, 31);
    auto reorder = [&](const std::vector<float>& v, bool back) {
      std::vector<float> out = v;
      for (int64_t row = 0; row < B * T * H; ++row)
        for (int64_t i = 0; i < r / 2; ++i)
          for (const int64_t k : {int64_t{0}, int64_t{1}}) {
            const int64_t adjacent = row * hd + 2 * i + k, halves = row * hd + i + k * r / 2;
            out[static_cast<size_t>(back ? adjacent : halves)] =
                v[static_cast<size_t>(back ? halves : adjacent)];
          }
      return out;
    };
    for (const bool forward : {true, false}) {
      std::vector<float> got = x, want = reorder(x, false);
      if (forward) {
        be->rope_forward(got.data(), B, T, H, hd, interleaved);
        be->rope_forward(want.data(), B, T, H, hd, split);
      } else {
        be->rope_backward(got.data(), B, T, H, hd, interleaved);
        be->rope_backward(want.data(), B, T, H, hd, split);
      }
      want = reorder(want, true);
      ASSERT_EQ(got, want) << (forward ? "forward" : "backward");
      ASSERT_NE(got, x) << "the rotation moved nothing";
    }
  }
}

struct AttentionGradShape {
  int64_t B, T, H, Hkv, hd;
};

// dq, dk, dv of attention with the given score form against finite differences.
void expect_attention_gradients_match(const AttentionScores& scores,
                                      AttentionGradShape shape = {2, 7, 4, 2, 8}) {
  auto be = make_cpu_backend();
  const auto [B, T, H, Hkv, hd] = shape;
  auto q = random_normal(B * T * H * hd, 9);
  auto k = random_normal(B * T * Hkv * hd, 10);
  auto v = random_normal(B * T * Hkv * hd, 11);
  const auto r = random_normal(q.size(), 12);
  std::vector<float> out(q.size()), lse(B * H * T);
  auto objective = [&] {
    be->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, Hkv, hd,
                          nullptr, scores);
    return weighted_sum(r, out);
  };
  objective();
  std::vector<float> dq(q.size(), 123.0f), dk(k.size(), 123.0f), dv(v.size(), 123.0f);
  be->attention_backward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(), v.data(),
                         out.data(), lse.data(), B, T, H, Hkv, hd, nullptr, scores);
  expect_gradient_matches("dq", q, dq, objective, kSmoothStep, kSmoothTol);
  expect_gradient_matches("dk", k, dk, objective, kSmoothStep, kSmoothTol);
  expect_gradient_matches("dv", v, dv, objective, kSmoothStep, kSmoothTol);
}

TEST(CpuBackendGrad, AttentionGqaOddLength) {
  expect_attention_gradients_match({});
}

// Gemma 2's scores: a scale of its own and the soft cap s ← c·tanh(s/c), c small enough (0.8 for
// scores of about ±2 here) that tanh bends them.
TEST(CpuBackendGrad, AttentionWithOwnScaleAndSoftCap) {
  expect_attention_gradients_match({0.7f, 0.8f});
}

// A sliding window of 3 keys (rows 3..6 of T = 7 lose their first keys), with plain scores and
// with Gemma 2's (whose even layers take a window).
TEST(CpuBackendGrad, AttentionInASlidingWindow) {
  expect_attention_gradients_match({0.0f, 0.0f, 3});
  expect_attention_gradients_match({0.7f, 0.8f, 3});
}

// Across blocks of 64 query rows (T = 130: blocks from rows 0, 64 and 128): with a window of 5
// the later blocks' first keys are 60 and 124, with one of 70 the last block's is 59, each block's
// rows starting at other keys.
TEST(CpuBackendGrad, AttentionInASlidingWindowAcrossQueryBlocks) {
  expect_attention_gradients_match({0.0f, 0.0f, 5}, {1, 130, 2, 1, 4});
  expect_attention_gradients_match({0.0f, 0.0f, 70}, {1, 130, 2, 1, 4});
}

// h = act(gate)·up: both gradients against finite differences.
void expect_glu_gradients_match(GluActivation act) {
  auto be = make_cpu_backend();
  const int64_t n = 24;
  auto gate = random_normal(n, 13, 2.0f);
  auto up = random_normal(n, 14);
  const auto r = random_normal(n, 15);
  std::vector<float> h(n);
  auto objective = [&] {
    be->glu_forward(h.data(), gate.data(), up.data(), n, act);
    return weighted_sum(r, h);
  };
  std::vector<float> dgate(n, 123.0f), dup(n, 123.0f);
  be->glu_backward(dgate.data(), dup.data(), r.data(), gate.data(), up.data(), n, act);
  expect_gradient_matches("dgate", gate, dgate, objective, kSmoothStep, kSmoothTol);
  expect_gradient_matches("dup", up, dup, objective, kSmoothStep, kSmoothTol);
}

TEST(CpuBackendGrad, SwiGlu) {
  expect_glu_gradients_match(GluActivation::kSilu);
}

// Gemma's GeGLU, h = gelu_tanh(gate)·up.
TEST(CpuBackendGrad, GeGlu) {
  expect_glu_gradients_match(GluActivation::kGeluTanh);
}

TEST(CpuBackendGrad, EmbeddingWithRepeatedTokens) {
  auto be = make_cpu_backend();
  const int64_t V = 5, D = 6;
  const std::vector<int32_t> tokens = {3, 1, 3, 0, 3, 1, 4, 4, 0};
  const int64_t n = static_cast<int64_t>(tokens.size());
  auto table = random_normal(V * D, 16);
  const auto r = random_normal(n * D, 17);
  std::vector<float> x(n * D);
  auto objective = [&] {
    be->embedding_forward(x.data(), tokens.data(), table.data(), n, D);
    return weighted_sum(r, x);
  };
  std::vector<float> dtable(V * D, 2.0f);
  be->embedding_backward(dtable.data(), r.data(), tokens.data(), n, D);
  expect_gradient_matches("dtable", table, minus(dtable, 2.0f), objective, kLinearStep, kLinearTol);
}

// A call's contribution is one float per element: each id's rows summed from zero in position
// order, then added to dtable once (so a micro-batch adds the same bits to an accumulator as to
// a zeroed buffer). dtable starts large, where adding token by token would round differently.
// A negative id (the padding token's, model/config.h) adds nothing.
TEST(CpuBackendGrad, EmbeddingAddsEachRowSumOnce) {
  auto be = make_cpu_backend();
  const int64_t V = 4, D = 70, n = 40;  // D spans two column blocks
  auto tokens = test::random_ids(n, static_cast<int32_t>(V), 18);
  for (int64_t i = 0; i < n; i += 7) tokens[i] = -1;
  const auto dx = random_normal(n * D, 19);
  std::vector<float> dtable(V * D), expected(V * D);
  for (int64_t e = 0; e < V * D; ++e) dtable[e] = 1000.0f + static_cast<float>(e);
  for (int64_t v = 0; v < V; ++v) {
    for (int64_t d = 0; d < D; ++d) {
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i)
        if (tokens[i] == v) sum += dx[i * D + d];
      expected[v * D + d] = dtable[v * D + d] + sum;
    }
  }
  be->embedding_backward(dtable.data(), dx.data(), tokens.data(), n, D);
  EXPECT_EQ(std::memcmp(dtable.data(), expected.data(), dtable.size() * sizeof(float)), 0);
}

TEST(CpuBackendGrad, CrossEntropyMeanLoss) {
  auto be = make_cpu_backend();
  const int64_t M = 4, V = 11;
  auto logits = random_normal(M * V, 18, 2.0f);
  const std::vector<int32_t> targets = {0, 10, 3, 3};
  std::vector<float> losses(M);
  auto objective = [&] {
    be->cross_entropy(losses.data(), nullptr, logits.data(), targets.data(), M, V, 1.0f);
    double mean = 0.0;
    for (float l : losses) mean += l;
    return mean / static_cast<double>(M);
  };
  std::vector<float> dlogits(M * V, 123.0f);
  be->cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), M, V,
                    1.0f / static_cast<float>(M));
  expect_gradient_matches("dlogits", logits, dlogits, objective, kSmoothStep, kSmoothTol);
}

// Gemma 2's final_logit_softcapping: the loss of soft-capped logits s = c·tanh(z/c)
// (softcap_inplace, then cross_entropy given c), differentiated with respect to the raw z, in
// place as the head runs it. c = 1.5 bends logits of about ±4.
TEST(CpuBackendGrad, CrossEntropyOfSoftCappedLogits) {
  auto be = make_cpu_backend();
  const int64_t M = 3, V = 13;
  const float cap = 1.5f;
  auto logits = random_normal(M * V, 19, 2.0f);
  const std::vector<int32_t> targets = {2, 12, kIgnoredTarget};
  std::vector<float> losses(M), capped(M * V);
  auto objective = [&] {
    capped = logits;
    be->softcap_inplace(capped.data(), cap, M * V);
    be->cross_entropy(losses.data(), nullptr, capped.data(), targets.data(), M, V, 1.0f);
    return static_cast<double>(losses[0]) + losses[1] + losses[2];
  };
  objective();
  std::vector<float> grads = capped;  // dlogits in place over the capped logits
  be->cross_entropy(losses.data(), grads.data(), grads.data(), targets.data(), M, V, 1.0f, cap);
  expect_gradient_matches("dlogits", logits, grads, objective, kSmoothStep, kSmoothTol);
}

}  // namespace
}  // namespace zt

// CPU backend: forward ops against direct double-precision implementations written here, plus
// the RoPE convention, numerical stability and aliasing contracts.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_math.h"
#include "test_cpu_backend_support.h"
#include "util/bf16.h"
#include "util/error.h"

namespace zt {
namespace {

using test::max_relative_error;
using test::random_ids;
using test::random_normal;

// Each output is a K-term fp32 dot product; whatever kernel and order OpenBLAS uses, it lies
// within γ_K·Σ_k |x_k·w_k| of the exact sum (u = 2^-24, γ_K = K·u/(1 − K·u); Higham §3.1, with
// FMA or without). The shapes include a ragged multi-tile one.
TEST(CpuBackendForward, MatmulMatchesDirectSum) {
  auto be = make_cpu_backend();
  for (const auto [M, N, K] : {std::array<int64_t, 3>{7, 5, 9}, {300, 270, 130}}) {
    const auto x = random_normal(M * K, 21);
    const auto w = random_normal(N * K, 22);
    std::vector<float> y(M * N);
    be->matmul_forward(y.data(), x.data(), w.data(), M, N, K);
    const double gamma = K * 0x1p-24 / (1 - K * 0x1p-24);
    int64_t outside = 0;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(x[m * K + k]) * w[n * K + k];  // exact in double
          exact += p;
          magnitude += std::abs(p);
        }
        // The double sum's own error (≤ γ^d_K·magnitude) is covered by 1% of slack.
        if (std::abs(y[m * N + n] - exact) > 1.01 * gamma * magnitude) ++outside;
      }
    }
    EXPECT_EQ(outside, 0) << M << "x" << N << "x" << K;
  }
}

TEST(CpuBackendForward, RmsNormMatchesFormula) {
  auto be = make_cpu_backend();
  const int64_t M = 4, D = 33;
  const float eps = 1e-6f;
  const auto x = random_normal(M * D, 23, 3.0f);
  const auto g = random_normal(D, 24);
  std::vector<float> y(M * D), rstd(M);
  be->rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), M, D, eps);
  std::vector<double> ref(M * D);
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0.0;
    for (int64_t d = 0; d < D; ++d) ss += double(x[m * D + d]) * x[m * D + d];
    const double r = 1.0 / std::sqrt(ss / D + eps);
    EXPECT_NEAR(rstd[m], r, 1e-6 * r);
    for (int64_t d = 0; d < D; ++d) ref[m * D + d] = x[m * D + d] * r * g[d];
  }
  EXPECT_LT(max_relative_error(y, ref), 1e-5);
}

// Rotate-half pairs element i with i + hd/2; the interleaved (GPT-J) convention pairs 2i with
// 2i+1. A unit vector e_0 at position 1 must therefore move into element hd/2, not element 1.
TEST(CpuBackendForward, RopeIsRotateHalfNotInterleaved) {
  auto be = make_cpu_backend();
  const int64_t T = 2, hd = 8;
  std::vector<float> x(T * hd, 0.0f);
  x[hd] = 1.0f;  // position 1, element 0
  be->rope_forward(x.data(), 1, T, 1, hd, RopeSpec::unscaled(10000.0f));
  EXPECT_FLOAT_EQ(x[hd + 0], static_cast<float>(std::cos(1.0)));
  EXPECT_FLOAT_EQ(x[hd + hd / 2], static_cast<float>(std::sin(1.0)));
  EXPECT_EQ(x[hd + 1], 0.0f);
}

// y against the formula x1' = x1·c − x2·s, x2' = x2·c + x1·s with angles rounded as Hugging Face
// rounds them in fp32 (inv_freq and t·inv_freq are fp32), over positions where that rounding
// matters (t up to 4000).
TEST(CpuBackendForward, RopeMatchesHfFp32Angles) {
  auto be = make_cpu_backend();
  const int64_t B = 1, T = 4001, H = 2, hd = 16;
  const float theta = 10000.0f;
  const auto x = random_normal(B * T * H * hd, 25);
  std::vector<float> y(x);
  be->rope_forward(y.data(), B, T, H, hd, RopeSpec::unscaled(theta));
  double worst = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* xr = x.data() + (t * H + h) * hd;
      const float* yr = y.data() + (t * H + h) * hd;
      for (int64_t i = 0; i < hd / 2; ++i) {
        const float inv_freq =
            1.0f / static_cast<float>(std::pow(double(theta), float(2 * i) / float(hd)));
        const double angle = static_cast<float>(t) * inv_freq;
        const double c = std::cos(angle), s = std::sin(angle);
        worst = std::max(worst, std::abs(yr[i] - (xr[i] * c - xr[i + hd / 2] * s)));
        worst = std::max(worst, std::abs(yr[i + hd / 2] - (xr[i + hd / 2] * c + xr[i] * s)));
      }
    }
  }
  EXPECT_LT(worst, 2e-6);
}

// The cached cos/sin table must serve shorter and longer sequences alike.
TEST(CpuBackendForward, RopeTableCacheAcrossLengths) {
  auto be = make_cpu_backend();
  const int64_t H = 2, hd = 8;
  const auto x = random_normal(9 * H * hd, 26);
  std::vector<float> short_a(x.begin(), x.begin() + 4 * H * hd), long_seq(x), short_b(short_a);
  be->rope_forward(short_a.data(), 1, 4, H, hd, RopeSpec::unscaled(500.0f));
  be->rope_forward(long_seq.data(), 1, 9, H, hd, RopeSpec::unscaled(500.0f));
  be->rope_forward(short_b.data(), 1, 4, H, hd, RopeSpec::unscaled(500.0f));
  for (size_t i = 0; i < short_a.size(); ++i) {
    EXPECT_EQ(short_a[i], long_seq[i]);
    EXPECT_EQ(short_a[i], short_b[i]);
  }
  std::vector<float> other_theta(x.begin(), x.begin() + 4 * H * hd);
  be->rope_forward(other_theta.data(), 1, 4, H, hd, RopeSpec::unscaled(10000.0f));
  EXPECT_NE(other_theta[H * hd + 1], short_a[H * hd + 1]);  // theta is part of the cache key
}

// Direct causal GQA attention in double: out and lse, with the bound on a float32 engine's error
// at each element. scores: the scale (1/sqrt(hd) when 0), Gemma 2's soft cap c of the scores,
// s ← c·tanh(s/c) (none when 0), and a sliding window w: query i sees keys i − w < j ≤ i, as
// transformers' masks keep them (every earlier key when 0).
//
// The bound, per query row (u = 2^-24; first order, with 1% on top): each score is an hd-term
// fp32 dot product times the scale, rounded to float (1/√hd), within
// δ_j = (hd + 2)·u·scale·Σ_d |q_d·k_d| in whatever order sgemm sums (Higham §3.1); a soft cap's
// division, tanh (2 ulps) and product add u·(|s_j| + 3c) and bend nothing further (|d tanh| ≤ 1).
// exp(s_j − max) adds the subtraction's rounding, at most u·R with R the row's score range, and
// fast_expf's 3e-7 (FastExpAccuracyAndRange): each term is within ε = max_j δ_j + 3e-7 + u·R
// relatively, the max cancelling. lse is then within ε + u·|log Σ| + u·|lse| (two float roundings);
// each probability within 2ε + 2u (the normaliser's float reciprocal and product); out = Σ_j
// p_j·v_j, at most T terms, within (2ε + (T + 2)·u)·Σ_j p_j·|v_j|.
struct AttentionReference {
  std::vector<double> out, lse, out_bound, lse_bound;
};

AttentionReference attention_reference(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, int64_t B, int64_t T, int64_t H,
                                       int64_t Hkv, int64_t hd,
                                       const AttentionScores& scores = {}) {
  constexpr double u = 0x1p-24, kFastExpError = 3e-7, kMargin = 1.01;
  const double scale = scores.scale > 0 ? double{scores.scale} : 1.0 / std::sqrt(double(hd));
  const double cap = scores.softcap;
  AttentionReference ref{std::vector<double>(B * T * H * hd), std::vector<double>(B * H * T),
                         std::vector<double>(B * T * H * hd), std::vector<double>(B * H * T)};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t first = scores.window > 0 ? std::max<int64_t>(0, i - scores.window + 1) : 0;
        std::vector<double> s(i + 1);
        double mx = -1e300, mn = 1e300, delta = 0.0;
        for (int64_t j = first; j <= i; ++j) {
          double magnitude = 0.0;
          for (int64_t d = 0; d < hd; ++d) {
            const double qk =
                double(q[((b * T + i) * H + h) * hd + d]) * k[((b * T + j) * Hkv + g) * hd + d];
            s[j] += qk;
            magnitude += std::abs(qk);
          }
          s[j] *= scale;
          double error = double(hd + 2) * u * scale * magnitude;
          if (cap > 0) {
            error += u * (std::abs(s[j]) + 3.0 * cap);
            s[j] = cap * std::tanh(s[j] / cap);
          }
          delta = std::max(delta, error);
          mx = std::max(mx, s[j]);
          mn = std::min(mn, s[j]);
        }
        const double term_error = delta + kFastExpError + u * (mx - mn);
        double sum = 0.0;
        for (int64_t j = first; j <= i; ++j) sum += std::exp(s[j] - mx);
        const int64_t row = (b * H + h) * T + i;
        ref.lse[row] = mx + std::log(sum);
        ref.lse_bound[row] =
            kMargin * (term_error + u * std::abs(std::log(sum)) + u * std::abs(ref.lse[row]));
        const double relative = kMargin * (2.0 * term_error + double(T + 2) * u);
        for (int64_t j = first; j <= i; ++j) {
          const double p = std::exp(s[j] - mx) / sum;
          for (int64_t d = 0; d < hd; ++d) {
            const double vj = v[((b * T + j) * Hkv + g) * hd + d];
            ref.out[((b * T + i) * H + h) * hd + d] += p * vj;
            ref.out_bound[((b * T + i) * H + h) * hd + d] += relative * p * std::abs(vj);
          }
        }
      }
    }
  }
  return ref;
}

// The largest |got − want| / bound over the elements: at most 1 when each is within its bound;
// infinite where an element is NaN (which no comparison would otherwise count).
double excess_over_bound(const std::vector<float>& got, const std::vector<double>& want,
                         const std::vector<double>& bound) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0.0;
  for (size_t n = 0; n < got.size() && n < want.size(); ++n) {
    const double excess = std::abs(got[n] - want[n]) / bound[n];
    worst = std::isnan(excess) ? std::numeric_limits<double>::infinity() : std::max(worst, excess);
    if (std::isinf(worst)) break;
  }
  return worst;
}

// Plain scores, and Gemma 2's: its own scale (query_pre_attn_scalar^−½) and a soft cap small
// enough that tanh bends most scores of these inputs (|s| up to about 3c); then sliding windows:
// 5 keys (every case's later rows lose keys), and 70 with Gemma 2's scores (after 8 or 74 cached
// rows of the 75 below, a block's first key inside the keys of the rows before it; the shorter
// cases fit in it).
const AttentionScores kScoreForms[] = {{}, {0.3f, 2.0f}, {0.0f, 0.0f, 5}, {0.3f, 2.0f, 70}};

TEST(CpuBackendForward, AttentionMatchesDirectGqa) {
  auto be = make_cpu_backend();
  struct Case {
    int64_t B, T, H, Hkv, hd;
  };
  for (const AttentionScores& scores : kScoreForms) {
    for (const Case c : {Case{2, 7, 4, 2, 8}, Case{1, 33, 6, 3, 16}, Case{1, 20, 4, 4, 32}}) {
      const auto q = random_normal(c.B * c.T * c.H * c.hd, 27, 1.5f);
      const auto k = random_normal(c.B * c.T * c.Hkv * c.hd, 28, 1.5f);
      const auto v = random_normal(c.B * c.T * c.Hkv * c.hd, 29);
      std::vector<float> out(q.size()), lse(c.B * c.H * c.T);
      be->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.T, c.H,
                            c.Hkv, c.hd, nullptr, scores);
      const AttentionReference ref =
          attention_reference(q, k, v, c.B, c.T, c.H, c.Hkv, c.hd, scores);
      EXPECT_LE(excess_over_bound(out, ref.out, ref.out_bound), 1.0)
          << "T=" << c.T << " softcap=" << scores.softcap << " window=" << scores.window;
      EXPECT_LE(excess_over_bound(lse, ref.lse, ref.lse_bound), 1.0)
          << "T=" << c.T << " softcap=" << scores.softcap << " window=" << scores.window;
    }
  }
}

// Incremental decoding (generate's key/value cache): rows that follow `past` cached ones.
// RoPE of rows past..T−1 is bitwise those rows of the whole sequence's rotation (one cos/sin
// table, the same elementwise products).
TEST(CpuBackendForward, RopeAfterCachedRowsRotatesThemAsTheWholeSequence) {
  auto be = make_cpu_backend();
  const int64_t T = 37, H = 3, hd = 16, past = 29;
  const RopeSpec rope = RopeSpec::unscaled(10000.0f);
  const auto x = random_normal(T * H * hd, 30);
  std::vector<float> whole(x), after(x.begin() + past * H * hd, x.end());
  be->rope_forward(whole.data(), 1, T, H, hd, rope);
  be->rope_forward_after(after.data(), 1, T - past, H, hd, rope, past);
  for (size_t i = 0; i < after.size(); ++i) ASSERT_EQ(after[i], whole[past * H * hd + i]) << i;
  // One row at a time on a backend of its own, past growing: its table outgrown again and again.
  auto growing = make_cpu_backend();
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> row(x.begin() + t * H * hd, x.begin() + (t + 1) * H * hd);
    growing->rope_forward_after(row.data(), 1, 1, H, hd, rope, t);
    for (int64_t i = 0; i < H * hd; ++i) ASSERT_EQ(row[i], whole[t * H * hd + i]) << t;
  }
}

// Query rows past..T−1 over the keys and values of rows 0..T−1: those rows of the direct causal
// attention, within the derived bound above; with past = 0 bitwise attention_forward.
void attention_after_cached_rows_matches(const std::vector<float>& q, const std::vector<float>& k,
                                         const std::vector<float>& v, int64_t T, int64_t H,
                                         int64_t Hkv, int64_t hd, const AttentionScores& scores) {
  auto be = make_cpu_backend();
  const AttentionReference ref = attention_reference(q, k, v, 1, T, H, Hkv, hd, scores);
  for (const int64_t past : {int64_t{0}, int64_t{1}, int64_t{8}, T - 1}) {
    const int64_t n = T - past;
    const std::vector<float> q_new(q.begin() + past * H * hd, q.end());
    std::vector<float> out(n * H * hd), lse(H * n);
    be->attention_forward_after(out.data(), lse.data(), q_new.data(), k.data(), v.data(), 1, n,
                                past, H, Hkv, hd, scores);
    // Rows past..T−1 of the reference: out's are its last n·H·hd, lse's the last n of each head.
    const auto rows_after = [&](const std::vector<double>& whole) {
      return std::vector<double>(whole.begin() + past * H * hd, whole.end());
    };
    const auto lse_rows_after = [&](const std::vector<double>& whole) {
      std::vector<double> rows(H * n);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < n; ++i) rows[h * n + i] = whole[h * T + past + i];
      return rows;
    };
    EXPECT_LE(excess_over_bound(out, rows_after(ref.out), rows_after(ref.out_bound)), 1.0)
        << "past=" << past << " softcap=" << scores.softcap << " window=" << scores.window;
    EXPECT_LE(excess_over_bound(lse, lse_rows_after(ref.lse), lse_rows_after(ref.lse_bound)), 1.0)
        << "past=" << past << " softcap=" << scores.softcap << " window=" << scores.window;
    if (past > 0) continue;
    std::vector<float> whole(out.size()), whole_lse(lse.size());
    be->attention_forward(whole.data(), whole_lse.data(), q.data(), k.data(), v.data(), 1, T, H,
                          Hkv, hd, nullptr, scores);
    EXPECT_EQ(whole, out);
    EXPECT_EQ(whole_lse, lse);
  }
}

TEST(CpuBackendForward, AttentionAfterCachedRowsMatchesDirectGqa) {
  const int64_t T = 75, H = 6, Hkv = 2, hd = 16;  // more than one block of 64 query rows
  const auto q = random_normal(T * H * hd, 31, 1.5f);
  const auto k = random_normal(T * Hkv * hd, 32, 1.5f);
  const auto v = random_normal(T * Hkv * hd, 33);
  for (const AttentionScores& scores : kScoreForms) {
    attention_after_cached_rows_matches(q, k, v, T, H, Hkv, hd, scores);
  }
}

// 64 gates, the first three saturating (±100) or zero, and their ups.
struct GluInputs {
  std::vector<float> gate = random_normal(64, 30, 3.0f), up = random_normal(64, 31);
  GluInputs() {
    gate[0] = 100.0f;
    gate[1] = -100.0f;
    gate[2] = 0.0f;
  }
  std::vector<float> forward(GluActivation act) const {
    std::vector<float> h(gate.size());
    make_cpu_backend()->glu_forward(h.data(), gate.data(), up.data(), 64, act);
    return h;
  }
};

TEST(CpuBackendForward, SwiGluMatchesFormulaIncludingSaturation) {
  const GluInputs in;
  const auto& gate = in.gate;
  const auto& up = in.up;
  const std::vector<float> h = in.forward(GluActivation::kSilu);
  std::vector<double> ref(64);
  for (size_t i = 0; i < 64; ++i) ref[i] = gate[i] / (1.0 + std::exp(-double(gate[i]))) * up[i];
  EXPECT_LT(max_relative_error(h, ref, 1e-6), 1e-6);
}

// PyTorch's gelu(approximate="tanh") times up, computed in double. The kernel's fp32 steps
// (about a dozen, tanh's few ulps among them) each round once; 1 + t cancels for negative gates as
// PyTorch's fp32 does, so the bound is absolute at that sum: 32 ulps of |a/2 · u| plus of |h|.
TEST(CpuBackendForward, GeGluMatchesThePytorchTanhGeluIncludingSaturation) {
  const GluInputs in;
  const auto& gate = in.gate;
  const auto& up = in.up;
  const std::vector<float> h = in.forward(GluActivation::kGeluTanh);
  const double k = std::sqrt(2.0 / M_PI), ulp = std::ldexp(1.0, -24);
  for (size_t i = 0; i < 64; ++i) {
    const double a = gate[i];
    const double ref = 0.5 * a * (1.0 + std::tanh(k * (a + 0.044715 * a * a * a))) * up[i];
    const double bound = 32 * ulp * (std::abs(0.5 * a * up[i]) + std::abs(ref));
    EXPECT_LE(std::abs(h[i] - ref), bound) << "gate " << a << " up " << up[i];
  }
  EXPECT_EQ(h[1], 0.0f);  // gelu(−100) is −0 in fp32: h is ±0
}

TEST(CpuBackendForward, EmbeddingCopiesRowsAndRejectsBadIds) {
  auto be = make_cpu_backend();
  const int64_t V = 6, D = 5;
  const auto table = random_normal(V * D, 32);
  const auto tokens = random_ids(11, V, 33);
  std::vector<float> x(tokens.size() * D);
  be->embedding_forward(x.data(), tokens.data(), table.data(), 11, D);
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(x[i * D + d], table[tokens[i] * D + d]);
  }
  const int32_t bad = -1;
  EXPECT_THROW(be->embedding_forward(x.data(), &bad, table.data(), 1, D), Error);
}

// Gemma 2's logit soft cap, y = c·tanh(y/c): in fp32 the formula within a few ulps of the double
// one (std::tanh's error), saturating at ±c; in bf16 the same fp32 value rounded once; more
// elements than one block of the 16-bit path. A cap of 0 is refused.
TEST(CpuBackendForward, SoftcapMatchesFormulaInFp32AndRoundsOnceInBf16) {
  auto be = make_cpu_backend();
  const float c = 30.0f;
  const int64_t n = 10000;
  auto x = random_normal(n, 35, 40.0f);
  x[0] = 1e30f, x[1] = -1e30f, x[2] = 0.0f;
  std::vector<float> y = x;
  be->softcap_inplace(y.data(), c, n);
  for (int64_t i = 0; i < n; ++i) {
    const double want = c * std::tanh(static_cast<double>(x[i]) / c);
    ASSERT_NEAR(y[i], want, 4 * c * std::numeric_limits<float>::epsilon()) << i;
    ASSERT_LE(std::abs(y[i]), c) << i;
  }
  EXPECT_EQ(y[0], c);
  EXPECT_EQ(y[1], -c);
  EXPECT_EQ(y[2], 0.0f);
  std::vector<bf16_t> stored(n);
  for (int64_t i = 0; i < n; ++i) stored[i] = float_to_bf16(x[i]);
  be->softcap_inplace(stored.data(), c, n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> one{bf16_to_float(float_to_bf16(x[i]))};
    be->softcap_inplace(one.data(), c, 1);
    ASSERT_EQ(bf16_to_float(stored[i]), round_to_bf16(one[0])) << i;
  }
  EXPECT_THROW(be->softcap_inplace(y.data(), 0.0f, n), Error);
}

TEST(CpuBackendForward, CrossEntropyStableAndInPlace) {
  auto be = make_cpu_backend();
  const int64_t M = 3, V = 50;
  auto logits = random_normal(M * V, 34, 3.0f);
  for (int64_t j = 0; j < V; ++j) logits[2 * V + j] += 1000.0f;  // exp would overflow unshifted
  const std::vector<int32_t> targets = {7, 0, 49};
  std::vector<float> losses(M), dlogits(M * V);
  be->cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), M, V, 0.5f);
  std::vector<double> loss_ref(M), grad_ref(M * V);
  for (int64_t m = 0; m < M; ++m) {
    double mx = -1e300, sum = 0.0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(logits[m * V + j]));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(logits[m * V + j] - mx);
    loss_ref[m] = mx + std::log(sum) - logits[m * V + targets[m]];
    for (int64_t j = 0; j < V; ++j) {
      grad_ref[m * V + j] = 0.5 * (std::exp(logits[m * V + j] - mx) / sum - (j == targets[m]));
    }
  }
  EXPECT_LT(max_relative_error(losses, loss_ref, 1.0), 1e-6);
  EXPECT_LT(max_relative_error(dlogits, grad_ref, 1e-2), 2e-6);

  // In place: dlogits == logits gives the same bits; losses alone (no dlogits) too.
  std::vector<float> in_place(logits), losses_in_place(M), losses_only(M);
  be->cross_entropy(losses_in_place.data(), in_place.data(), in_place.data(), targets.data(), M, V,
                    0.5f);
  be->cross_entropy(losses_only.data(), nullptr, logits.data(), targets.data(), M, V, 0.5f);
  EXPECT_EQ(in_place, dlogits);
  EXPECT_EQ(losses_in_place, losses);
  EXPECT_EQ(losses_only, losses);
  // The scale as grad_scale times a factor read from memory when the op runs: the same bits as
  // their fp32 product by value (0.1 · 1/3, rounded once); another factor, other bits.
  const float a = 0.1f, b = 1.0f / 3.0f;
  std::vector<float> by_value(M * V), factored(M * V);
  be->cross_entropy(losses_in_place.data(), by_value.data(), logits.data(), targets.data(), M, V,
                    a * b);
  be->cross_entropy(losses_in_place.data(), factored.data(), logits.data(), targets.data(), M, V, a,
                    0.0f, &b);
  EXPECT_EQ(factored, by_value);
  const float other = b * 1.5f;
  be->cross_entropy(losses_in_place.data(), factored.data(), logits.data(), targets.data(), M, V, a,
                    0.0f, &other);
  EXPECT_NE(factored, by_value);

  const int32_t bad_target = static_cast<int32_t>(V);
  EXPECT_THROW(be->cross_entropy(losses.data(), nullptr, logits.data(), &bad_target, 1, V, 1.0f),
               Error);
}

TEST(CpuBackendForward, FastExpAccuracyAndRange) {
  double worst = 0.0;
  for (double x = -87.0; x <= 88.0; x += 0.0137) {
    const float xf = static_cast<float>(x);
    const double exact = std::exp(double(xf));
    worst = std::max(worst, std::abs(cpu::fast_expf(xf) - exact) / exact);
  }
  EXPECT_LT(worst, 3e-7);  // a few ulp
  EXPECT_EQ(cpu::fast_expf(0.0f), 1.0f);
  EXPECT_EQ(cpu::fast_expf(-88.0f), 0.0f);
  EXPECT_EQ(cpu::fast_expf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isfinite(cpu::fast_expf(1e30f)));
  EXPECT_TRUE(std::isnan(cpu::fast_expf(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace zt

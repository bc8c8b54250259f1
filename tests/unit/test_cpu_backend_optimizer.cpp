// CPU backend: AdamW against a scalar double reference, sum of squares, elementwise helpers, and
// bitwise determinism of the reductions across thread counts.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "test_cpu_backend_support.h"
#include "util/error.h"

namespace zt {
namespace {

using test::random_ids;
using test::random_normal;

TEST(CpuBackendOptimizer, AdamWMatchesDoubleReference) {
  auto be = make_cpu_backend();
  const int64_t n = 1000;
  auto master = random_normal(n, 41);
  std::vector<float> m(n, 0.0f), v(n, 0.0f), param_f32(n);
  std::vector<bf16_t> param_bf16(n);
  std::vector<double> ref_w(master.begin(), master.end()), ref_m(n, 0.0), ref_v(n, 0.0);
  AdamWHyper h;
  h.lr = 1e-2f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.5f;
  for (int64_t step = 1; step <= 4; ++step) {
    const auto grad = random_normal(n, 42 + static_cast<uint32_t>(step));
    h.step = step;
    be->adamw(master.data(), m.data(), v.data(), grad.data(), param_bf16.data(), param_f32.data(),
              n, h);
    const double b1 = h.beta1, b2 = h.beta2;
    for (int64_t i = 0; i < n; ++i) {
      const double g = double(grad[i]) * h.grad_scale;
      ref_m[i] = b1 * ref_m[i] + (1 - b1) * g;
      ref_v[i] = b2 * ref_v[i] + (1 - b2) * g * g;
      const double m_hat = ref_m[i] / (1 - std::pow(b1, double(step)));
      const double v_hat = ref_v[i] / (1 - std::pow(b2, double(step)));
      ref_w[i] -= double(h.lr) * m_hat / (std::sqrt(v_hat) + h.eps) +
                  double(h.lr) * h.weight_decay * ref_w[i];
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(master[i], ref_w[i], 2e-6 * std::max(1.0, std::abs(ref_w[i])))
          << "step " << step << " element " << i;
      ASSERT_NEAR(m[i], ref_m[i], 1e-6 * std::abs(ref_m[i]) + 1e-8) << "step " << step;
      ASSERT_NEAR(v[i], ref_v[i], 1e-6 * std::abs(ref_v[i]) + 1e-10) << "step " << step;
      ASSERT_EQ(param_bf16[i], float_to_bf16(master[i]));
      ASSERT_EQ(std::memcmp(&param_f32[i], &master[i], sizeof(float)), 0);
    }
  }
  h.step = 0;  // bias correction needs a 1-based step
  EXPECT_THROW(be->adamw(master.data(), m.data(), v.data(), master.data(), nullptr, nullptr, n, h),
               Error);
}

TEST(CpuBackendOptimizer, SumSquares) {
  auto be = make_cpu_backend();
  const auto x = random_normal(100003, 43);
  double ref = 0.0;
  for (float v : x) ref += double(v) * v;
  EXPECT_NEAR(be->sum_squares(x.data(), static_cast<int64_t>(x.size())), ref, 1e-12 * ref);
  EXPECT_EQ(be->sum_squares(x.data(), 0), 0.0);
}

TEST(CpuBackendOptimizer, ElementwiseAndBf16) {
  auto be = make_cpu_backend();
  std::vector<float> y = {1.0f, -2.0f, 3.5f}, x = {0.5f, 0.25f, -1.0f};
  be->add_inplace(y.data(), x.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{1.5f, -1.75f, 2.5f}));
  be->scale_inplace(y.data(), -2.0f, 3);
  EXPECT_EQ(y, (std::vector<float>{-3.0f, 3.5f, -5.0f}));

  // Ties round to the even mantissa: 1 + 2^-8 → 1, 1 + 3·2^-8 → 1 + 2^-6; just above a tie
  // rounds up.
  const std::vector<float> in = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f,
                                 -3.0f};
  std::vector<bf16_t> out(in.size());
  be->to_bf16(out.data(), in.data(), static_cast<int64_t>(in.size()));
  std::vector<float> back(in.size());
  be->from_bf16(back.data(), out.data(), static_cast<int64_t>(in.size()));
  EXPECT_EQ(back, (std::vector<float>{1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -3.0f}));
}

// Runs fn with 1, 2 and 3 OpenMP threads; every run must return the same bytes.
void expect_same_bits_for_thread_counts(const char* what,
                                        const std::function<std::vector<float>()>& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = fn();
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    const auto many = fn();
    ASSERT_EQ(one.size(), many.size());
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
        << what << " differs between 1 and " << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(CpuBackendDeterminism, SumSquaresAcrossThreadCounts) {
  auto be = make_cpu_backend();
  const auto x = random_normal(300007, 44);
  expect_same_bits_for_thread_counts("sum_squares", [&] {
    const double s = be->sum_squares(x.data(), static_cast<int64_t>(x.size()));
    std::vector<float> bits(2);
    std::memcpy(bits.data(), &s, sizeof s);
    return bits;
  });
}

TEST(CpuBackendDeterminism, AttentionBackwardAcrossThreadCounts) {
  auto be = make_cpu_backend();
  const int64_t B = 2, T = 37, H = 4, Hkv = 2, hd = 16;
  const auto q = random_normal(B * T * H * hd, 45);
  const auto k = random_normal(B * T * Hkv * hd, 46);
  const auto v = random_normal(B * T * Hkv * hd, 47);
  const auto dout = random_normal(q.size(), 48);
  expect_same_bits_for_thread_counts("attention", [&] {
    std::vector<float> out(q.size()), lse(B * H * T), dq(q.size()), dk(k.size()), dv(v.size());
    be->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, Hkv, hd);
    be->attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                           v.data(), out.data(), lse.data(), B, T, H, Hkv, hd);
    std::vector<float> all(out);
    all.insert(all.end(), lse.begin(), lse.end());
    for (const auto* part : {&dq, &dk, &dv}) all.insert(all.end(), part->begin(), part->end());
    return all;
  });
}

TEST(CpuBackendDeterminism, EmbeddingAndRmsNormBackwardAcrossThreadCounts) {
  auto be = make_cpu_backend();
  const int64_t V = 7, D = 300, n = 512;
  const auto tokens = random_ids(n, V, 49);
  const auto dx = random_normal(n * D, 50);
  const auto x = random_normal(n * D, 51);
  const auto g = random_normal(D, 52);
  expect_same_bits_for_thread_counts("embedding/rmsnorm backward", [&] {
    std::vector<float> dtable(V * D, 0.0f), y(n * D), rstd(n), dxn(n * D, 0.0f), dg(D, 0.0f);
    be->embedding_backward(dtable.data(), dx.data(), tokens.data(), n, D);
    be->rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), n, D, 1e-5f);
    be->rmsnorm_backward(dxn.data(), dg.data(), dx.data(), x.data(), g.data(), rstd.data(), n, D);
    dtable.insert(dtable.end(), dg.begin(), dg.end());
    dtable.insert(dtable.end(), dxn.begin(), dxn.end());
    return dtable;
  });
}

// OpenBLAS's own thread split changes an element's bits (its kernels treat tile edges
// differently); the backend cuts C into fixed tiles and runs OpenBLAS single-threaded, so the
// linear layer's bits depend on neither OMP_NUM_THREADS nor the BLAS thread setting a caller
// left behind. The shapes span several tiles in both directions, with ragged edges.
TEST(CpuBackendDeterminism, MatmulAcrossThreadCounts) {
  auto be = make_cpu_backend();
  const int64_t M = 300, N = 520, K = 72;
  const auto x = random_normal(M * K, 53);
  const auto w = random_normal(N * K, 54);
  const auto dy = random_normal(M * N, 55);
  auto run = [&] {
    std::vector<float> y(M * N), dx(M * K), dw(N * K, 0.0f);
    be->matmul_forward(y.data(), x.data(), w.data(), M, N, K);
    be->matmul_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), M, N, K, false,
                        GradWrite::kAdd);
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), dw.begin(), dw.end());
    return y;
  };
  const int saved_blas = openblas_get_num_threads();
  openblas_set_num_threads(1);
  const int saved_omp = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = run();
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);  // what another library might leave behind
    const auto many = run();
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
        << "matmul differs between 1 and " << threads << " threads";
  }
  omp_set_num_threads(saved_omp);
  openblas_set_num_threads(saved_blas);
}

// The linear layer's token rows come from tiles of 128 rows: a product over 256 rows gives every
// row the same bits as two products over 128 rows (one micro-batch of 8 × 32 tokens or two of
// 4 × 32), forward and for the input gradient.
TEST(CpuBackendDeterminism, MatmulRowsDoNotDependOnTheBatch) {
  auto be = make_cpu_backend();
  const int64_t M = 256, half = 128, N = 300, K = 96;
  const auto x = random_normal(M * K, 56);
  const auto w = random_normal(N * K, 57);
  const auto dy = random_normal(M * N, 58);
  std::vector<float> y(M * N), dx(M * K), y_parts(M * N), dx_parts(M * K);
  be->matmul_forward(y.data(), x.data(), w.data(), M, N, K);
  be->matmul_backward(dx.data(), nullptr, dy.data(), x.data(), w.data(), M, N, K, false,
                      GradWrite::kAdd);
  for (int64_t r0 : {int64_t{0}, half}) {
    be->matmul_forward(y_parts.data() + r0 * N, x.data() + r0 * K, w.data(), half, N, K);
    be->matmul_backward(dx_parts.data() + r0 * K, nullptr, dy.data() + r0 * N, x.data() + r0 * K,
                        w.data(), half, N, K, false, GradWrite::kAdd);
  }
  EXPECT_EQ(std::memcmp(y.data(), y_parts.data(), y.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(dx.data(), dx_parts.data(), dx.size() * sizeof(float)), 0);
}

// ./run.sh test's variants choose OpenBLAS's kernels with OPENBLAS_CORETYPE; OpenBLAS falls back
// to the detected core without a word when it does not know the name, so check it took effect.
TEST(CpuBackendDeterminism, OpenBlasRunsTheRequestedCoreType) {
  const char* want = std::getenv("OPENBLAS_CORETYPE");
  if (!want || !*want)
    GTEST_SKIP() << "OPENBLAS_CORETYPE not set; detected " << openblas_get_corename();
  EXPECT_STRCASEEQ(openblas_get_corename(), want);
}

}  // namespace
}  // namespace zt

// The CUDA kernels with activations and working parameters stored in IEEE fp16 (--precision fp16
// --activations fp16) against the CPU backend's implementation of the same contract: inputs
// widened, fp32 compute, each output rounded once (util/bf16.h's float_to_fp16).
//
// Tolerance, derived as in test_cuda_bf16_storage.cpp with fp16's step: the fp32 results differ
// by at most kFp32Tolerance; rounding each to fp16 can then put them one fp16 step apart, 2⁻¹⁰ of
// the value (10 stored significand bits), so an fp16 output is within kFp16Step + kFp32Tolerance.
// The conversions, RoPE, the embedding and a residual add are bitwise.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "util/bf16.h"

namespace zt::gpu_test {
namespace {

constexpr double kFp16Step = 1.0 / 1024.0;
constexpr double kRoundedTolerance = kFp16Step + kFp32Tolerance;
constexpr DType kF16 = DType::kFloat16;

using Fp16Tensor = Stored16Tensor<kF16>;

class CudaFp16Storage : public ::testing::Test {
 protected:
  cpu::CpuBackend cpu_;
  std::unique_ptr<cuda::CudaBackend> gpu_ =
      make_cuda_backend(0, test_options(cuda::GemmCompute::kFp32));
};

// __float2half_rn against util/bf16.h's float_to_fp16 over every scale fp16 has and beyond
// (subnormals, the overflow to infinity, ±0, infinities, NaNs of either sign and with a payload):
// the same bits; and the widening back, exact.
TEST_F(CudaFp16Storage, ConversionsAreBitwiseTheCpus) {
  std::vector<float> values = random_floats(200000, 1);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = std::ldexp(values[i], static_cast<int>(i % 48) - 30);  // 2^-30 .. 2^17
  values.insert(values.end(), {65504.0f, 65519.0f, 65520.0f, -1e9f, 5.96e-8f, 2.98e-8f, 0.0f, -0.0f,
                               INFINITY, -INFINITY, std::nanf(""), -std::nanf(""),
                               std::bit_cast<float>(0x7f812345u)});  // a NaN with a payload
  DeviceBuffer<float> d_values(values);
  DeviceBuffer<uint16_t> d_bits(values.size());
  gpu_->to_fp16(d_bits.get(), d_values.get(), static_cast<int64_t>(values.size()));
  std::vector<uint16_t> want(values.size());
  floats_to_fp16(values.data(), want.data(), values.size());
  EXPECT_TRUE(bitwise_equal(d_bits.download(), want, "to_fp16"));
  DeviceBuffer<float> d_back(values.size());
  gpu_->from_fp16(d_back.get(), d_bits.get(), static_cast<int64_t>(values.size()));
  std::vector<float> back(values.size());
  fp16_to_floats(want.data(), back.data(), want.size());
  EXPECT_TRUE(bitwise_equal(d_back.download(), back, "from_fp16"));
  // Raw fp16 words the CPU would not write: NaNs with payloads (signalling, negative), the
  // infinities, the largest subnormal; widened with their payload kept, as fp16_to_float does.
  const std::vector<uint16_t> words = {0x7c01, 0xfd55, 0x7e00, 0x7fff, 0x7c00, 0xfc00, 0x03ff};
  DeviceBuffer<uint16_t> d_words(words);
  DeviceBuffer<float> d_widened(words.size());
  gpu_->from_fp16(d_widened.get(), d_words.get(), static_cast<int64_t>(words.size()));
  std::vector<float> widened(words.size());
  fp16_to_floats(words.data(), widened.data(), words.size());
  EXPECT_TRUE(bitwise_equal(d_widened.download(), widened, "from_fp16 of raw words"));
}

TEST_F(CudaFp16Storage, RmsNormSwiGluAddAndEmbedding) {
  const int64_t M = 37, D = 200, n = M * D;
  Fp16Tensor x(random_floats(n, 2)), g(random_floats(D, 3)), dy(random_floats(n, 4)),
      dx(random_floats(n, 5)), y(n);
  std::vector<float> rstd(M), dg(D, 0.0f);
  cpu_.rmsnorm_forward(y.cpu_view(), rstd.data(), x.cpu_view(), g.cpu_view(), M, D, 1e-5f);
  cpu_.rmsnorm_backward(dx.cpu_view(), dg.data(), dy.cpu_view(), x.cpu_view(), g.cpu_view(),
                        rstd.data(), M, D);
  DeviceBuffer<float> d_rstd(M), d_dg(std::vector<float>(D, 0.0f));
  gpu_->rmsnorm_forward(y.gpu_view(), d_rstd.get(), x.gpu_view(), g.gpu_view(), M, D, 1e-5f);
  gpu_->rmsnorm_backward(dx.gpu_view(), d_dg.get(), dy.gpu_view(), x.gpu_view(), g.gpu_view(),
                         d_rstd.get(), M, D);
  EXPECT_TRUE(close(y.gpu(), y.cpu(), kRoundedTolerance, "rmsnorm y"));
  EXPECT_TRUE(close(dx.gpu(), dx.cpu(), kRoundedTolerance, "rmsnorm dx (+=)"));
  EXPECT_TRUE(close(d_dg.download(), dg, kFp32Tolerance, "rmsnorm dg"));

  Fp16Tensor gate(random_floats(n, 6, 3.0f)), up(random_floats(n, 7)), h(n);
  cpu_.glu_forward(h.cpu_view(), gate.cpu_view(), up.cpu_view(), n);
  gpu_->glu_forward(h.gpu_view(), gate.gpu_view(), up.gpu_view(), n);
  EXPECT_TRUE(close(h.gpu(), h.cpu(), kRoundedTolerance, "swiglu h"));

  Fp16Tensor resid(random_floats(n, 8)), branch(random_floats(n, 9));
  cpu_.add_inplace(resid.cpu_view(), branch.cpu_view(), n);
  gpu_->add_inplace(resid.gpu_view(), branch.gpu_view(), n);
  EXPECT_TRUE(bitwise_equal(resid.device.download(), resid.host, "add_inplace"));

  const int32_t V = 50;
  const auto tokens = random_ids(M, V, 10);
  DeviceBuffer<int32_t> d_tokens(tokens);
  Fp16Tensor table(random_floats(V * D, 11)), e(n);
  cpu_.embedding_forward(e.cpu_view(), tokens.data(), table.cpu_view(), M, D);
  gpu_->embedding_forward(e.gpu_view(), d_tokens.get(), table.gpu_view(), M, D);
  EXPECT_TRUE(bitwise_equal(e.device.download(), e.host, "embedding forward"));
}

// fp16 GEMMs: fp16 products are exact in fp32 and accumulate in fp32 on both backends.
TEST_F(CudaFp16Storage, MatmulAndCrossEntropy) {
  const int64_t M = 37, N = 100, K = 64;
  Fp16Tensor x(random_floats(M * K, 12)), w(random_floats(N * K, 13)), dy(random_floats(M * N, 14)),
      y(M * N), dx(random_floats(M * K, 15));
  const auto dw0 = random_floats(N * K, 16);
  std::vector<float> dw = dw0;
  cpu_.matmul_forward(y.cpu_view(), x.cpu_view(), w.cpu_view(), M, N, K);
  cpu_.matmul_backward(dx.cpu_view(), dw.data(), dy.cpu_view(), x.cpu_view(), w.cpu_view(), M, N, K,
                       true, GradWrite::kAdd);
  DeviceBuffer<float> d_dw(dw0);
  gpu_->matmul_forward(y.gpu_view(), x.gpu_view(), w.gpu_view(), M, N, K);
  gpu_->matmul_backward(dx.gpu_view(), d_dw.get(), dy.gpu_view(), x.gpu_view(), w.gpu_view(), M, N,
                        K, true, GradWrite::kAdd);
  EXPECT_TRUE(close(y.gpu(), y.cpu(), kRoundedTolerance, "y"));
  EXPECT_TRUE(close(dx.gpu(), dx.cpu(), kRoundedTolerance, "dx (+=)"));
  EXPECT_TRUE(close(d_dw.download(), dw, kFp32Tolerance, "dw (fp32 +=)"));

  const int64_t rows = 33, vocab = 32000;
  const auto targets = random_ids(rows, static_cast<int32_t>(vocab), 17);
  DeviceBuffer<int32_t> d_targets(targets);
  Fp16Tensor logits(random_floats(rows * vocab, 18, 4.0f));
  std::vector<float> losses(rows);
  cpu_.cross_entropy(losses.data(), logits.cpu_view(), logits.cpu_view(), targets.data(), rows,
                     vocab, 0.5f);
  DeviceBuffer<float> d_losses(rows);
  gpu_->cross_entropy(d_losses.get(), logits.gpu_view(), logits.gpu_view(), d_targets.get(), rows,
                      vocab, 0.5f);
  EXPECT_TRUE(close(d_losses.download(), losses, kFp32Tolerance, "losses"));
  EXPECT_TRUE(close(logits.gpu(), logits.cpu(), kRoundedTolerance, "dlogits"));
}

}  // namespace
}  // namespace zt::gpu_test

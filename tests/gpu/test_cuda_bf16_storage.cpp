// The CUDA kernels with activations (and working parameters) stored in bf16 (--activations bf16)
// against the CPU backend's implementation of the same contract (backend/backend.h: inputs
// widened, fp32 compute, each output rounded once). Both sides get the same bf16 inputs.
//
// Tolerance, derived: the two backends' fp32 results differ by the fp32 tolerance of the fp32
// kernel tests (kFp32Tolerance, relative to |value| + rms); rounding each to bf16 can then put
// them on neighbouring bf16 values, at most one bf16 step apart, i.e. 2⁻⁷·|value| (a step is
// 2⁻⁷ of the smallest value of its binade). So a bf16 output is within kBf16Step + kFp32Tolerance;
// an fp32 output (dg, dtable, dw) within the fp32 tests' own tolerance. Ops whose fp32 results are
// bitwise equal (RoPE, the embedding) stay bitwise equal after rounding.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "util/bf16.h"
#include "util/ignored_target.h"

namespace zt::gpu_test {
namespace {

constexpr double kBf16Step = 1.0 / 128.0;
constexpr double kRoundedTolerance = kBf16Step + kFp32Tolerance;

using Bf16Tensor = Stored16Tensor<DType::kBf16>;

class CudaBf16Storage : public ::testing::Test {
 protected:
  cpu::CpuBackend cpu_;
  std::unique_ptr<cuda::CudaBackend> gpu_ =
      make_cuda_backend(0, test_options(cuda::GemmCompute::kFp32));
};

TEST_F(CudaBf16Storage, RmsNormRopeSwiGluAdd) {
  const int64_t M = 37, D = 200, n = M * D;
  Bf16Tensor x(random_floats(n, 1)), g(random_floats(D, 2)), dy(random_floats(n, 3)),
      dx(random_floats(n, 4)), y(n);
  std::vector<float> rstd(M), dg(D, 0.0f);
  cpu_.rmsnorm_forward(y.host.data(), rstd.data(), x.host.data(), g.host.data(), M, D, 1e-5f);
  cpu_.rmsnorm_backward(dx.host.data(), dg.data(), dy.host.data(), x.host.data(), g.host.data(),
                        rstd.data(), M, D);
  DeviceBuffer<float> d_rstd(M), d_dg(std::vector<float>(D, 0.0f));
  gpu_->rmsnorm_forward(y.device.get(), d_rstd.get(), x.device.get(), g.device.get(), M, D, 1e-5f);
  gpu_->rmsnorm_backward(dx.device.get(), d_dg.get(), dy.device.get(), x.device.get(),
                         g.device.get(), d_rstd.get(), M, D);
  EXPECT_TRUE(close(y.gpu(), y.cpu(), kRoundedTolerance, "rmsnorm y"));
  EXPECT_TRUE(close(d_rstd.download(), rstd, kFp32Tolerance, "rstd"));
  EXPECT_TRUE(close(dx.gpu(), dx.cpu(), kRoundedTolerance, "rmsnorm dx (+=)"));
  EXPECT_TRUE(close(d_dg.download(), dg, kFp32Tolerance, "rmsnorm dg"));

  // RoPE: the same table and unfused fp32 operations, so the same bits before and after rounding.
  const int64_t B = 2, T = 37, H = 3, hd = 16;
  Bf16Tensor r(random_floats(B * T * H * hd, 5));
  cpu_.rope_forward(r.host.data(), B, T, H, hd, RopeSpec::unscaled(10000.0f));
  gpu_->rope_forward(r.device.get(), B, T, H, hd, RopeSpec::unscaled(10000.0f));
  EXPECT_TRUE(bitwise_equal(r.device.download(), r.host, "rope forward"));
  cpu_.rope_backward(r.host.data(), B, T, H, hd, RopeSpec::unscaled(10000.0f));
  gpu_->rope_backward(r.device.get(), B, T, H, hd, RopeSpec::unscaled(10000.0f));
  EXPECT_TRUE(bitwise_equal(r.device.download(), r.host, "rope backward"));

  Bf16Tensor gate(random_floats(n, 6, 3.0f)), up(random_floats(n, 7)), dh(random_floats(n, 8)),
      h(n), dgate(n), dup(n);
  cpu_.glu_forward(h.host.data(), gate.host.data(), up.host.data(), n);
  cpu_.glu_backward(dgate.host.data(), dup.host.data(), dh.host.data(), gate.host.data(),
                    up.host.data(), n);
  gpu_->glu_forward(h.device.get(), gate.device.get(), up.device.get(), n);
  gpu_->glu_backward(dgate.device.get(), dup.device.get(), dh.device.get(), gate.device.get(),
                     up.device.get(), n);
  EXPECT_TRUE(close(h.gpu(), h.cpu(), kRoundedTolerance, "swiglu h"));
  EXPECT_TRUE(close(dgate.gpu(), dgate.cpu(), kRoundedTolerance, "swiglu dgate"));
  EXPECT_TRUE(close(dup.gpu(), dup.cpu(), kRoundedTolerance, "swiglu dup"));

  // A residual add: one fp32 addition of two bf16 values, rounded once: the same bits.
  Bf16Tensor resid(random_floats(n, 9)), branch(random_floats(n, 10));
  cpu_.add_inplace(resid.host.data(), branch.host.data(), n);
  gpu_->add_inplace(resid.device.get(), branch.device.get(), n);
  EXPECT_TRUE(bitwise_equal(resid.device.download(), resid.host, "add_inplace"));

  // Mixed activation types in one op are refused, naming it.
  DeviceBuffer<float> f32(n);
  try {
    gpu_->add_inplace(resid.device.get(), f32.get(), n);
    ADD_FAILURE() << "bf16 += fp32 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_inplace"), std::string::npos) << e.what();
  }
}

TEST_F(CudaBf16Storage, EmbeddingAndCrossEntropy) {
  const int64_t n = 300, D = 130;
  const int32_t V = 50;
  const auto tokens = random_ids(n, V, 9);
  DeviceBuffer<int32_t> d_tokens(tokens);
  Bf16Tensor table(random_floats(V * D, 10)), x(n * D), dx(random_floats(n * D, 11));
  const auto dtable0 = random_floats(V * D, 12);
  std::vector<float> dtable = dtable0;
  cpu_.embedding_forward(x.host.data(), tokens.data(), table.host.data(), n, D);
  cpu_.embedding_backward(dtable.data(), dx.host.data(), tokens.data(), n, D);
  DeviceBuffer<float> d_dtable(dtable0);
  gpu_->embedding_forward(x.device.get(), d_tokens.get(), table.device.get(), n, D);
  gpu_->embedding_backward(d_dtable.get(), dx.device.get(), d_tokens.get(), n, D);
  EXPECT_TRUE(bitwise_equal(x.device.download(), x.host, "embedding forward"));
  EXPECT_TRUE(bitwise_equal(d_dtable.download(), dtable, "embedding backward"));

  // Cross-entropy in place over bf16 logits (the model's use): fp32 losses, bf16 dlogits. 32000
  // takes the groups of 8 logits; 32001 and 50257 (V % 8 ≠ 0: rows off 16-byte alignment) the
  // strided path and its tail. Every third target is left out of the loss.
  for (const int64_t vocab : {int64_t{32000}, int64_t{32001}, int64_t{50257}}) {
    SCOPED_TRACE("V=" + std::to_string(vocab));
    const int64_t M = 33;
    auto targets = random_ids(M, static_cast<int32_t>(vocab), 13);
    for (int64_t i = 2; i < M; i += 3) targets[static_cast<size_t>(i)] = kIgnoredTarget;
    DeviceBuffer<int32_t> d_targets(targets);
    Bf16Tensor logits(random_floats(M * vocab, 14, 4.0f));
    std::vector<float> losses(M);
    cpu_.cross_entropy(losses.data(), logits.host.data(), logits.host.data(), targets.data(), M,
                       vocab, 0.5f);
    DeviceBuffer<float> d_losses(M);
    gpu_->cross_entropy(d_losses.get(), logits.device.get(), logits.device.get(), d_targets.get(),
                        M, vocab, 0.5f);
    EXPECT_TRUE(close(d_losses.download(), losses, kFp32Tolerance, "losses"));
    EXPECT_TRUE(close(logits.gpu(), logits.cpu(), kRoundedTolerance, "dlogits"));
  }
}

// bf16 GEMMs: bf16 × bf16 products are exact in fp32 and accumulate in fp32 on both backends, so
// they differ only in the order of the sums (the fp32 tolerance) before each rounds its output.
TEST_F(CudaBf16Storage, MatmulForwardBackward) {
  const int64_t shapes[][3] = {{1, 8, 8}, {37, 100, 64}, {256, 384, 128}};
  for (const auto& shape : shapes) {
    const int64_t M = shape[0], N = shape[1], K = shape[2];
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
    Bf16Tensor x(random_floats(M * K, 15)), w(random_floats(N * K, 16)),
        dy(random_floats(M * N, 17)), y(M * N), dx(random_floats(M * K, 18));
    const auto dw0 = random_floats(N * K, 19);
    std::vector<float> dw = dw0;
    cpu_.matmul_forward(y.host.data(), x.host.data(), w.host.data(), M, N, K);
    cpu_.matmul_backward(dx.host.data(), dw.data(), dy.host.data(), x.host.data(), w.host.data(), M,
                         N, K, /*accumulate_dx=*/true, GradWrite::kAdd);
    DeviceBuffer<float> d_dw(dw0);
    gpu_->matmul_forward(y.device.get(), x.device.get(), w.device.get(), M, N, K);
    gpu_->matmul_backward(dx.device.get(), d_dw.get(), dy.device.get(), x.device.get(),
                          w.device.get(), M, N, K, true, GradWrite::kAdd);
    EXPECT_TRUE(close(y.gpu(), y.cpu(), kRoundedTolerance, "y"));
    EXPECT_TRUE(close(dx.gpu(), dx.cpu(), kRoundedTolerance, "dx (+=)"));
    EXPECT_TRUE(close(d_dw.download(), dw, kFp32Tolerance, "dw (fp32 +=)"));
  }
  // bf16 activations with fp32 weights cannot be one GEMM: refused, naming the op.
  Bf16Tensor x(random_floats(8 * 8, 20)), y(8 * 8);
  DeviceBuffer<float> w(random_floats(8 * 8, 21));
  try {
    gpu_->matmul_forward(y.device.get(), x.device.get(), w.get(), 8, 8, 8);
    ADD_FAILURE() << "bf16 x with fp32 w was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul_forward"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zt::gpu_test

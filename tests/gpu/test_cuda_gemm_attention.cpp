// The cuBLASLt paths against the CPU backend: the linear layer (forward, dx = / +=, dw += / =) and
// causal GQA attention (forward, lse, backward), each with bf16 tensor-core compute (rtol 1e-2)
// and exact fp32 compute (rtol 1e-5), ragged shapes (T not a multiple of 32), several attention
// passes (small scratch), and two runs bitwise equal.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "backend/device_arena_plan.h"
#include "gpu_test_util.h"
#include "util/error.h"

namespace zt::gpu_test {
namespace {

using cuda::GemmCompute;

class CudaGemm : public ::testing::TestWithParam<GemmCompute> {
 protected:
  cpu::CpuBackend cpu_;
  std::unique_ptr<cuda::CudaBackend> gpu_ = make_cuda_backend(0, test_options(GetParam()));
};

TEST_P(CudaGemm, LinearForwardBackward) {
  const double rtol = tolerance(GetParam());
  const int64_t shapes[][3] = {{1, 1, 1}, {17, 33, 65}, {64, 128, 96}, {130, 70, 45}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
    const auto x = random_floats(M * K, 31), w = random_floats(N * K, 32),
               dy = random_floats(M * N, 33);
    const auto dx0 = random_floats(M * K, 34), dw0 = random_floats(N * K, 35);
    for (bool accumulate : {false, true}) {
      std::vector<float> y(M * N), dx = dx0, dw = dw0;
      cpu_.matmul_forward(y.data(), x.data(), w.data(), M, N, K);
      cpu_.matmul_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), M, N, K, accumulate,
                           GradWrite::kAdd);
      DeviceBuffer<float> d_x(x), d_w(w), d_dy(dy), d_y(M * N), d_dx(M * K), d_dw(dw0);
      if (accumulate) d_dx.upload(dx0);  // "=" leaves the poison to be overwritten
      gpu_->matmul_forward(d_y.get(), d_x.get(), d_w.get(), M, N, K);
      gpu_->matmul_backward(d_dx.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(), M, N, K,
                            accumulate, GradWrite::kAdd);
      EXPECT_TRUE(close(d_y.download(), y, rtol, "y"));
      EXPECT_TRUE(close(d_dx.download(), dx, rtol, accumulate ? "dx +=" : "dx ="));
      EXPECT_TRUE(close(d_dw.download(), dw, rtol, "dw +="));
      // Determinism: the same products again give the same bits.
      DeviceBuffer<float> d_y2(M * N), d_dw2(dw0);
      gpu_->matmul_forward(d_y2.get(), d_x.get(), d_w.get(), M, N, K);
      gpu_->matmul_backward(nullptr, d_dw2.get(), d_dy.get(), d_x.get(), d_w.get(), M, N, K, false,
                            GradWrite::kAdd);
      EXPECT_TRUE(bitwise_equal(d_y2.download(), d_y.download(), "y run 2"));
      EXPECT_TRUE(bitwise_equal(d_dw2.download(), d_dw.download(), "dw run 2"));
    }
  }
}

// GradWrite::kAssign (β = 0) into a buffer of NaN against kAdd into zeros and the CPU: the engine
// writes a micro-batch's weight gradients over whatever a buffer held (no gradient buffer is
// zeroed), alone and as one strided batch with a frozen weight between two trained ones.
TEST_P(CudaGemm, WeightGradientAssignOverwritesWhateverTheBufferHeld) {
  const double rtol = tolerance(GetParam());
  const int64_t M = 130, N = 48, K = 64, count = 3;
  const auto x = random_floats(M * K, 41), dy = random_floats(count * M * N, 42);
  const std::vector<float> nan(count * N * K, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> want(count * N * K, 0.0f);
  for (int64_t i = 0; i < count; ++i)
    cpu_.matmul_backward(nullptr, want.data() + i * N * K, dy.data() + i * M * N, x.data(), nullptr,
                         M, N, K, false, GradWrite::kAdd);
  DeviceBuffer<float> d_x(x), d_dy(dy), d_added(std::vector<float>(N * K, 0.0f)),
      d_assigned(std::vector<float>(nan.begin(), nan.begin() + N * K));
  gpu_->matmul_backward(nullptr, d_added.get(), d_dy.get(), d_x.get(), nullptr, M, N, K, false,
                        GradWrite::kAdd);
  gpu_->matmul_backward(nullptr, d_assigned.get(), d_dy.get(), d_x.get(), nullptr, M, N, K, false,
                        GradWrite::kAssign);
  const std::vector<float> first(want.begin(), want.begin() + N * K);
  EXPECT_TRUE(close(d_assigned.download(), first, rtol, "dw = (one GEMM)"));
  EXPECT_TRUE(close(d_assigned.download(), d_added.download(), rtol, "dw = against dw += 0"));
  // The batch: weights 0 and 2 assigned, weight 1 frozen keeps its NaN.
  DeviceBuffer<float> d_batch(nan);
  float* dws[count] = {d_batch.get(), nullptr, d_batch.get() + 2 * N * K};
  const ConstTensorView dys[count] = {d_dy.get(), d_dy.get() + M * N, d_dy.get() + 2 * M * N};
  gpu_->matmul_weight_grad_batch(dws, dys, d_x.get(), count, M, N, K, GradWrite::kAssign);
  const std::vector<float> got = d_batch.download();
  for (int64_t i : {int64_t{0}, int64_t{2}}) {
    const std::vector<float> slot(got.begin() + i * N * K, got.begin() + (i + 1) * N * K),
        ref(want.begin() + i * N * K, want.begin() + (i + 1) * N * K);
    EXPECT_TRUE(close(slot, ref, rtol, "batched dw = " + std::to_string(i)));
  }
  EXPECT_TRUE(std::isnan(got[N * K])) << "the frozen weight's buffer was written";
}

struct AttentionCase {
  int64_t B, T, H, Hkv, hd;
  size_t scratch_bytes;         // 0: the default test scratch
  bool document_masks = false;  // periodic_doc_starts on both backends
  AttentionScores scores{};     // the scale, soft cap and sliding window of the scores
};

std::string describe(const AttentionCase& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
         " Hkv=" + std::to_string(c.Hkv) + " hd=" + std::to_string(c.hd) +
         " scratch=" + std::to_string(c.scratch_bytes) + (c.document_masks ? " masked" : "") +
         " softcap=" + std::to_string(c.scores.softcap) +
         " window=" + std::to_string(c.scores.window);
}

void check_attention(cpu::CpuBackend& cpu, GemmCompute compute, const AttentionCase& c) {
  SCOPED_TRACE(describe(c));
  const double rtol = tolerance(compute);
  const double grad_rtol = chain_tolerance(compute);  // the gradients: two chained GEMMs
  cuda::CudaBackendOptions options = test_options(compute);
  if (c.scratch_bytes > 0) options.attention_scratch_bytes = c.scratch_bytes;
  auto gpu = make_cuda_backend(0, options);
  const int64_t q_elems = c.B * c.T * c.H * c.hd, kv_elems = c.B * c.T * c.Hkv * c.hd;
  const auto q = random_floats(q_elems, 41, 0.5f), k = random_floats(kv_elems, 42, 0.5f),
             v = random_floats(kv_elems, 43), dout = random_floats(q_elems, 44);
  std::vector<float> out(q_elems), lse(c.B * c.H * c.T), dq(q_elems), dk(kv_elems), dv(kv_elems);
  const std::vector<int32_t> starts =
      c.document_masks ? periodic_doc_starts(c.B, c.T) : std::vector<int32_t>{};
  const int32_t* cpu_starts = c.document_masks ? starts.data() : nullptr;
  cpu.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), c.B, c.T, c.H, c.Hkv,
                        c.hd, cpu_starts, c.scores);
  cpu.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                         out.data(), lse.data(), c.B, c.T, c.H, c.Hkv, c.hd, cpu_starts, c.scores);

  DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_dout(dout);
  DeviceBuffer<int32_t> d_starts(c.document_masks ? starts : std::vector<int32_t>{0});
  const int32_t* gpu_starts = c.document_masks ? d_starts.get() : nullptr;
  std::vector<float> first_dq, first_dk, first_dv;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer<float> d_out(q_elems), d_lse(lse.size()), d_dq(q_elems), d_dk(kv_elems),
        d_dv(kv_elems);
    gpu->attention_forward(d_out.get(), d_lse.get(), d_q.get(), d_k.get(), d_v.get(), c.B, c.T, c.H,
                           c.Hkv, c.hd, gpu_starts, c.scores);
    // The backward gets the CPU's out/lse, so its check does not inherit forward differences.
    DeviceBuffer<float> d_out_ref(out), d_lse_ref(lse);
    gpu->attention_backward(d_dq.get(), d_dk.get(), d_dv.get(), d_dout.get(), d_q.get(), d_k.get(),
                            d_v.get(), d_out_ref.get(), d_lse_ref.get(), c.B, c.T, c.H, c.Hkv, c.hd,
                            gpu_starts, c.scores);
    EXPECT_TRUE(close(d_out.download(), out, rtol, "out"));
    EXPECT_TRUE(close(d_lse.download(), lse, rtol, "lse"));
    EXPECT_TRUE(close(d_dq.download(), dq, grad_rtol, "dq"));
    EXPECT_TRUE(close(d_dk.download(), dk, grad_rtol, "dk"));
    EXPECT_TRUE(close(d_dv.download(), dv, grad_rtol, "dv"));
    if (run == 0) {
      first_dq = d_dq.download(), first_dk = d_dk.download(), first_dv = d_dv.download();
    } else {
      EXPECT_TRUE(bitwise_equal(d_dq.download(), first_dq, "dq run 2"));
      EXPECT_TRUE(bitwise_equal(d_dk.download(), first_dk, "dk run 2"));
      EXPECT_TRUE(bitwise_equal(d_dv.download(), first_dv, "dv run 2"));
    }
  }
}

class CudaAttention : public ::testing::TestWithParam<GemmCompute> {
 protected:
  cpu::CpuBackend cpu_;
};

TEST_P(CudaAttention, MatchesCpuForwardBackward) {
  const AttentionCase cases[] = {
      {1, 1, 1, 1, 8, 0},     // one token
      {2, 37, 4, 2, 16, 0},   // ragged T, GQA group 2
      {1, 65, 6, 3, 32, 0},   // ragged T, group 2, odd kv heads
      {2, 100, 4, 1, 64, 0},  // multi-query
      {1, 128, 8, 8, 64, 0},  // multi-head, T a multiple of 32
  };
  for (const AttentionCase& c : cases) check_attention(cpu_, GetParam(), c);
}

// Gemma 2's scores (a scale of its own, the soft cap s ← c·tanh(s/c); c small enough to bend these
// scores), with and without document masks, in one pass and in several.
TEST_P(CudaAttention, MatchesCpuWithOwnScaleAndSoftCap) {
  const AttentionScores gemma2{0.9f, 0.5f};
  const int64_t T = 37;
  const size_t matrix_bytes = cuda::align_up(T * T * sizeof(float));
  check_attention(cpu_, GetParam(), {2, T, 4, 2, 16, 0, false, gemma2});
  check_attention(cpu_, GetParam(), {2, T, 8, 4, 16, 3 * 2 * matrix_bytes, true, gemma2});
}

// A sliding window (Mistral's; Gemma 2's with its scores): the row kernels keep each query's last
// `window` keys, as the CPU attention does, alone, under document masks and in several passes.
TEST_P(CudaAttention, MatchesCpuInASlidingWindow) {
  const int64_t T = 100;
  const size_t matrix_bytes = cuda::align_up(T * T * sizeof(float));
  check_attention(cpu_, GetParam(), {2, T, 4, 2, 16, 0, false, {0.0f, 0.0f, 7}});
  check_attention(cpu_, GetParam(), {3, T, 4, 2, 16, 0, true, {0.0f, 0.0f, 30}});
  check_attention(cpu_, GetParam(),
                  {2, T, 8, 4, 16, 3 * 2 * matrix_bytes, false, {0.9f, 0.5f, 30}});
}

// Document masks (block-causal attention, backend.h): the row kernels keep each query's own
// document's keys, as the CPU attention does, in one pass and in several.
TEST_P(CudaAttention, MatchesCpuWithDocumentMasks) {
  const int64_t T = 100;
  const size_t matrix_bytes = cuda::align_up(T * T * sizeof(float));
  check_attention(cpu_, GetParam(), {3, T, 4, 2, 16, 0, true});
  check_attention(cpu_, GetParam(), {2, T, 8, 4, 16, 3 * 2 * matrix_bytes, true});
}

// A scratch arena that holds only a few heads: several passes per (batch, group offset), so the
// pass bookkeeping (strides, lse offsets, dK/dV accumulation over j) is exercised.
TEST_P(CudaAttention, SeveralPassesPerHeadGroup) {
  const int64_t T = 37;
  const size_t matrix_bytes = cuda::align_up(T * T * sizeof(float));
  check_attention(cpu_, GetParam(), {2, T, 8, 4, 16, 3 * 2 * matrix_bytes});  // 3 heads backward
  check_attention(cpu_, GetParam(), {1, T, 5, 5, 16, 2 * matrix_bytes});      // 1 head backward
}

TEST_P(CudaAttention, ScratchTooSmallIsAnError) {
  auto options = test_options(GetParam());
  options.attention_scratch_bytes = 1024;
  auto gpu = make_cuda_backend(0, options);
  DeviceBuffer<float> q(64 * 16), out(64 * 16), lse(64);
  EXPECT_THROW(
      gpu->attention_forward(out.get(), lse.get(), q.get(), q.get(), q.get(), 1, 64, 1, 1, 16),
      Error);
}

std::string compute_name(const ::testing::TestParamInfo<GemmCompute>& info) {
  return info.param == GemmCompute::kFp32 ? "Fp32" : "Bf16TensorCores";
}

INSTANTIATE_TEST_SUITE_P(Compute, CudaGemm,
                         ::testing::Values(GemmCompute::kFp32, GemmCompute::kBf16TensorCores),
                         compute_name);
INSTANTIATE_TEST_SUITE_P(Compute, CudaAttention,
                         ::testing::Values(GemmCompute::kFp32, GemmCompute::kBf16TensorCores),
                         compute_name);

}  // namespace
}  // namespace zt::gpu_test

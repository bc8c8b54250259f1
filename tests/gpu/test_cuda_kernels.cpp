// CUDA backend kernels (everything but the GEMM paths) against the CPU backend on random inputs,
// ragged shapes included; "=" outputs are poisoned (NaN) before each run; every op is also run
// twice and must give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>

#include "backend/cuda/cuda_kernels.h"
#include "backend/device_arena_plan.h"
#include "cuda_kernels_fixture.h"
#include "gpu_test_util.h"
#include "util/error.h"
#include "util/ignored_target.h"

namespace zt::gpu_test {
namespace {

// What metrics.jsonl reports as backend_scratch_bytes: test_options' 8 + 16 + 1 MiB of arena
// regions (no fused attention, so no cuDNN workspace); the CPU backend holds none.
TEST_F(CudaKernels, ScratchBytesAreTheArenaRegions) {
  EXPECT_EQ(gpu_->scratch_bytes(), int64_t{25} << 20);
  EXPECT_EQ(cpu_.scratch_bytes(), 0);
}

// Plain, and Gemma's (1 + g) (weight_offset 1).
TEST_F(CudaKernels, RmsNormForwardBackward) {
  const int64_t shapes[][2] = {{1, 8}, {33, 100}, {7, 4096}, {300, 64}};
  for (const float offset : {0.0f, 1.0f})
    for (const auto& shape : shapes) {
      const int64_t M = shape[0], D = shape[1];
      SCOPED_TRACE("M=" + std::to_string(M) + " D=" + std::to_string(D) +
                   " offset=" + std::to_string(offset));
      const auto x = random_floats(M * D, 1), g = random_floats(D, 2), dy = random_floats(M * D, 3);
      const auto dx0 = random_floats(M * D, 4), dg0 = random_floats(D, 5);
      std::vector<float> y(M * D), rstd(M), dx = dx0, dg = dg0;
      cpu_.rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), M, D, 1e-5f, offset);
      cpu_.rmsnorm_backward(dx.data(), dg.data(), dy.data(), x.data(), g.data(), rstd.data(), M, D,
                            offset);

      DeviceBuffer<float> d_x(x), d_g(g), d_dy(dy), d_y(M * D), d_rstd(M);
      std::vector<float> first_dx, first_dg;
      for (int run = 0; run < 2; ++run) {
        d_y.poison();
        d_rstd.poison();
        DeviceBuffer<float> d_dx(dx0), d_dg(dg0);
        gpu_->rmsnorm_forward(d_y.get(), d_rstd.get(), d_x.get(), d_g.get(), M, D, 1e-5f, offset);
        gpu_->rmsnorm_backward(d_dx.get(), d_dg.get(), d_dy.get(), d_x.get(), d_g.get(),
                               d_rstd.get(), M, D, offset);
        EXPECT_TRUE(close(d_y.download(), y, kFp32Tolerance, "y"));
        EXPECT_TRUE(close(d_rstd.download(), rstd, kFp32Tolerance, "rstd"));
        EXPECT_TRUE(close(d_dx.download(), dx, kFp32Tolerance, "dx"));
        EXPECT_TRUE(close(d_dg.download(), dg, kFp32Tolerance, "dg"));
        if (run == 0) {
          first_dx = d_dx.download();
          first_dg = d_dg.download();
        } else {
          EXPECT_TRUE(bitwise_equal(d_dx.download(), first_dx, "dx run 2"));
          EXPECT_TRUE(bitwise_equal(d_dg.download(), first_dg, "dg run 2"));
        }
      }
      // kAssign writes dg over whatever it held (NaN here): the CPU's assigned sums.
      const std::vector<float> nans(D, std::nanf(""));
      std::vector<float> assigned = nans;
      cpu_.rmsnorm_backward(nullptr, assigned.data(), dy.data(), x.data(), g.data(), rstd.data(), M,
                            D, offset, GradWrite::kAssign);
      ASSERT_TRUE(std::all_of(assigned.begin(), assigned.end(), [](float v) {
        return std::isfinite(v);
      }));  // close() takes NaN for NaN: the CPU's sums must be numbers
      DeviceBuffer<float> d_assigned(nans);
      gpu_->rmsnorm_backward(nullptr, d_assigned.get(), d_dy.get(), d_x.get(), d_g.get(),
                             d_rstd.get(), M, D, offset, GradWrite::kAssign);
      EXPECT_TRUE(close(d_assigned.download(), assigned, kFp32Tolerance, "dg assigned"));
    }
}

// SwiGLU, and Gemma's GeGLU (GELU's tanh form).
TEST_F(CudaKernels, GluForwardBackward) {
  for (const GluActivation act : {GluActivation::kSilu, GluActivation::kGeluTanh})
    for (int64_t n : {1, 1000, 4097}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (act == GluActivation::kSilu ? " silu" : " gelu"));
      const auto gate = random_floats(n, 7, 3.0f), up = random_floats(n, 8),
                 dh = random_floats(n, 9);
      std::vector<float> h(n), dgate(n), dup(n);
      cpu_.glu_forward(h.data(), gate.data(), up.data(), n, act);
      cpu_.glu_backward(dgate.data(), dup.data(), dh.data(), gate.data(), up.data(), n, act);
      DeviceBuffer<float> d_gate(gate), d_up(up), d_dh(dh), d_h(n), d_dgate(n), d_dup(n);
      gpu_->glu_forward(d_h.get(), d_gate.get(), d_up.get(), n, act);
      gpu_->glu_backward(d_dgate.get(), d_dup.get(), d_dh.get(), d_gate.get(), d_up.get(), n, act);
      EXPECT_TRUE(close(d_h.download(), h, kFp32Tolerance, "h"));
      EXPECT_TRUE(close(d_dgate.download(), dgate, kFp32Tolerance, "dgate"));
      EXPECT_TRUE(close(d_dup.download(), dup, kFp32Tolerance, "dup"));
    }
}

// Forward copies rows; backward sums each id's rows in token order and adds the sum once, like
// the CPU: both bitwise equal, repeats (few distinct ids, long runs of one id) and many distinct
// ids alike, and rows wider than the block (several columns per thread). The sorted kernel runs
// every shape but the last, whose 600,000 positions' sort does not fit the reduction scratch, so
// the scan kernel runs it. Up to 4096 positions CUB sorts in one block; a 1b step's 8192 and
// 16384 take its multi-pass sort, with Zipf-like ids (skewed_ids: runs of hundreds of one id,
// longer than a block's 256 and spread over two column tiles at D = 2048).
TEST_F(CudaKernels, EmbeddingForwardBackwardBitwise) {
  const int64_t shapes[][4] = {{1, 3, 5, 0},           {37, 64, 7, 0},    {300, 130, 50, 0},
                               {1000, 33, 5000, 0},    {70, 4100, 9, 0},  {4096, 96, 3, 0},
                               {8192, 2048, 32000, 1}, {16384, 96, 3, 1}, {16384, 40, 50000, 1},
                               {600000, 3, 50, 0}};
  for (const auto& s : shapes) {
    const int64_t n = s[0], D = s[1];
    const int32_t V = static_cast<int32_t>(s[2]);
    const bool skewed = s[3] != 0;
    SCOPED_TRACE("n=" + std::to_string(n) + " D=" + std::to_string(D) + " V=" + std::to_string(V) +
                 (skewed ? " skewed ids" : ""));
    const auto tokens = skewed ? skewed_ids(n, V, 10) : random_ids(n, V, 10);
    auto grad_tokens = tokens;  // the padding token's positions add nothing (-1)
    for (int64_t i = 0; i < n; i += 5) grad_tokens[static_cast<size_t>(i)] = -1;
    const auto table = random_floats(V * D, 11), dx = random_floats(n * D, 12);
    const auto dtable0 = random_floats(V * D, 13);
    std::vector<float> x(n * D), dtable = dtable0;
    cpu_.embedding_forward(x.data(), tokens.data(), table.data(), n, D);
    cpu_.embedding_backward(dtable.data(), dx.data(), grad_tokens.data(), n, D);
    DeviceBuffer<int32_t> d_tokens(tokens), d_grad_tokens(grad_tokens);
    DeviceBuffer<float> d_table(table), d_dx(dx), d_x(n * D), d_dtable(dtable0);
    gpu_->embedding_forward(d_x.get(), d_tokens.get(), d_table.get(), n, D);
    gpu_->embedding_backward(d_dtable.get(), d_dx.get(), d_grad_tokens.get(), n, D);
    EXPECT_TRUE(bitwise_equal(d_x.download(), x, "embedding forward"));
    EXPECT_TRUE(bitwise_equal(d_dtable.download(), dtable, "embedding backward"));
    // Each kernel alone, so that a backend sending every shape to one of them still fails here:
    // the sorted one (with scratch of its own) and the scan one.
    const size_t scratch_bytes = cuda::embedding_sort_scratch_bytes(n);
    if (n <= 16384) {  // up to a 1b step's 2 × 8192 positions the backend takes the sorted kernel
      EXPECT_LE(scratch_bytes + cuda::kArenaAlignment, cuda::kReductionScratchBytes);
    }
    DeviceBuffer<uint8_t> scratch(scratch_bytes);
    DeviceBuffer<float> d_sorted(dtable0), d_scan(dtable0);
    cuda::launch_embedding_backward_sorted(d_sorted.get(), d_dx.get(), d_grad_tokens.get(), n, D,
                                           scratch.get(), scratch_bytes, nullptr);
    cuda::launch_embedding_backward(d_scan.get(), d_dx.get(), d_grad_tokens.get(), n, D, nullptr);
    ZT_CUDA_CHECK(cudaGetLastError());
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(bitwise_equal(d_sorted.download(), dtable, "the sorted kernel"));
    EXPECT_TRUE(bitwise_equal(d_scan.download(), dtable, "the scan kernel"));
  }
}

TEST_F(CudaKernels, CrossEntropyLossAndGradient) {
  const int64_t shapes[][2] = {{1, 2}, {5, 1000}, {33, 32000}, {7, 50257}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], V = s[1];
    SCOPED_TRACE("M=" + std::to_string(M) + " V=" + std::to_string(V));
    auto logits = random_floats(M * V, 14, 4.0f);
    auto targets = random_ids(M, static_cast<int32_t>(V), 15);
    // SFT: every third target (but the first row of a one-row case) left out of the loss.
    for (int64_t i = 2; i < M; i += 3) targets[static_cast<size_t>(i)] = kIgnoredTarget;
    // Row 1: the first half of its logits −∞ (a masked vocabulary), so at the larger V every
    // thread meets −∞ first and then again: each adds e^−∞ = 0, never e^(−∞+∞) = NaN. Its target
    // is finite.
    if (M > 1) {
      std::fill_n(logits.begin() + V, V / 2, -std::numeric_limits<float>::infinity());
      targets[1] = static_cast<int32_t>(V - 1);
    }
    std::vector<float> losses(M), dlogits(M * V), losses_only(M);
    cpu_.cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), M, V, 0.5f);
    cpu_.cross_entropy(losses_only.data(), nullptr, logits.data(), targets.data(), M, V, 0.5f);
    DeviceBuffer<int32_t> d_targets(targets);
    DeviceBuffer<float> d_logits(logits), d_losses(M), d_dlogits(M * V);
    gpu_->cross_entropy(d_losses.get(), d_dlogits.get(), d_logits.get(), d_targets.get(), M, V,
                        0.5f);
    EXPECT_TRUE(close(d_losses.download(), losses, kFp32Tolerance, "losses"));
    EXPECT_TRUE(close(d_dlogits.download(), dlogits, kFp32Tolerance, "dlogits"));
    d_losses.poison();
    gpu_->cross_entropy(d_losses.get(), nullptr, d_logits.get(), d_targets.get(), M, V, 0.5f);
    EXPECT_TRUE(close(d_losses.download(), losses_only, kFp32Tolerance, "losses without grad"));
    // In place (dlogits aliases logits), and bitwise equal to the out-of-place run.
    DeviceBuffer<float> d_inplace(logits);
    d_losses.poison();
    gpu_->cross_entropy(d_losses.get(), d_inplace.get(), d_inplace.get(), d_targets.get(), M, V,
                        0.5f);
    EXPECT_TRUE(bitwise_equal(d_inplace.download(), d_dlogits.download(), "in-place dlogits"));
    // The scale as a factor in device memory, read by the kernel (micro-batch graphs): the same
    // bits as their fp32 product by value (0.1 · 1/3, rounded once).
    const float a = 0.1f, b = 1.0f / 3.0f;
    DeviceBuffer<float> d_factor(std::vector<float>{b}), d_scaled(M * V), d_by_value(M * V);
    gpu_->cross_entropy(d_losses.get(), d_by_value.get(), d_logits.get(), d_targets.get(), M, V,
                        a * b);
    gpu_->cross_entropy(d_losses.get(), d_scaled.get(), d_logits.get(), d_targets.get(), M, V, a,
                        0.0f, d_factor.get());
    EXPECT_TRUE(bitwise_equal(d_scaled.download(), d_by_value.download(), "a device factor"));
  }
}

// Gemma 2's final_logit_softcapping: softcap_inplace (y = c·tanh(y/c)) and the cross-entropy of
// the capped logits, whose gradient is taken with respect to the raw ones, against the CPU.
TEST_F(CudaKernels, SoftcappedCrossEntropy) {
  const int64_t M = 9, V = 32000;
  const float cap = 30.0f;
  const auto logits = random_floats(M * V, 16, 40.0f);
  auto targets = random_ids(M, static_cast<int32_t>(V), 17);
  targets[4] = kIgnoredTarget;
  std::vector<float> capped = logits, losses(M);
  cpu_.softcap_inplace(capped.data(), cap, M * V);
  std::vector<float> dlogits = capped;
  cpu_.cross_entropy(losses.data(), dlogits.data(), dlogits.data(), targets.data(), M, V, 0.5f,
                     cap);
  DeviceBuffer<int32_t> d_targets(targets);
  DeviceBuffer<float> d_logits(logits), d_losses(M);
  gpu_->softcap_inplace(d_logits.get(), cap, M * V);
  EXPECT_TRUE(close(d_logits.download(), capped, kFp32Tolerance, "capped logits"));
  gpu_->cross_entropy(d_losses.get(), d_logits.get(), d_logits.get(), d_targets.get(), M, V, 0.5f,
                      cap);
  EXPECT_TRUE(close(d_losses.download(), losses, kFp32Tolerance, "losses"));
  EXPECT_TRUE(close(d_logits.download(), dlogits, kFp32Tolerance, "dlogits"));
}

// The q/k/v/o biases (Qwen2, attention_bias): y += b broadcast over rows, db += the column sums
// (in double, chunked on the GPU: the CPU's value within fp32 rounding, bitwise on a rerun).
TEST_F(CudaKernels, BiasForwardBackward) {
  const int64_t shapes[][2] = {{1, 8}, {33, 100}, {4096, 96}};
  for (const auto& shape : shapes) {
    const int64_t M = shape[0], N = shape[1];
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N));
    const auto y0 = random_floats(M * N, 21), b = random_floats(N, 22),
               dy = random_floats(M * N, 23);
    const auto db0 = random_floats(N, 24);
    std::vector<float> y = y0, db = db0;
    cpu_.bias_forward(y.data(), b.data(), M, N);
    cpu_.bias_backward(db.data(), dy.data(), M, N);
    DeviceBuffer<float> d_b(b), d_dy(dy);
    std::vector<float> first_db;
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer<float> d_y(y0), d_db(db0);
      gpu_->bias_forward(d_y.get(), d_b.get(), M, N);
      gpu_->bias_backward(d_db.get(), d_dy.get(), M, N);
      EXPECT_TRUE(bitwise_equal(d_y.download(), y, "y"));
      EXPECT_TRUE(close(d_db.download(), db, kFp32Tolerance, "db"));
      if (run == 0)
        first_db = d_db.download();
      else
        EXPECT_TRUE(bitwise_equal(d_db.download(), first_db, "db run 2"));
    }
  }
  // bf16 activations with an fp32 or a bf16 bias: the CPU's bits (one rounding of an fp32 sum).
  const int64_t M = 33, N = 100;
  std::vector<bf16_t> y0(M * N), dy(M * N), b16(N);
  const auto y_values = random_floats(M * N, 25), dy_values = random_floats(M * N, 26);
  const auto b = random_floats(N, 27);
  for (int64_t i = 0; i < M * N; ++i) y0[i] = float_to_bf16(y_values[i]);
  for (int64_t i = 0; i < M * N; ++i) dy[i] = float_to_bf16(dy_values[i]);
  for (int64_t i = 0; i < N; ++i) b16[i] = float_to_bf16(b[i]);
  for (bool bf16_bias : {false, true}) {
    SCOPED_TRACE(bf16_bias ? "bf16 bias" : "fp32 bias");
    std::vector<bf16_t> y = y0;
    const auto db0 = random_floats(N, 28);  // db += the sums: both sides start from db0
    std::vector<float> db = db0;
    const ConstTensorView cpu_b =
        bf16_bias ? ConstTensorView(b16.data()) : ConstTensorView(b.data());
    cpu_.bias_forward(y.data(), cpu_b, M, N);
    cpu_.bias_backward(db.data(), dy.data(), M, N);
    DeviceBuffer<bf16_t> d_y(y0), d_dy(dy), d_b16(b16);
    DeviceBuffer<float> d_b(b), d_db(db0);
    const ConstTensorView gpu_b =
        bf16_bias ? ConstTensorView(d_b16.get()) : ConstTensorView(d_b.get());
    gpu_->bias_forward(d_y.get(), gpu_b, M, N);
    gpu_->bias_backward(d_db.get(), d_dy.get(), M, N);
    EXPECT_EQ(d_y.download(), y);
    EXPECT_TRUE(close(d_db.download(), db, kFp32Tolerance, "db"));
  }
}

TEST_F(CudaKernels, CrossEntropyIgnoredTargetHasNoLossAndNoGradient) {
  const std::vector<float> logits = random_floats(2 * 10, 16);
  DeviceBuffer<float> d_logits(logits), d_losses(2), d_dlogits(20);
  d_dlogits.poison();
  DeviceBuffer<int32_t> d_targets(std::vector<int32_t>{kIgnoredTarget, 4});
  gpu_->cross_entropy(d_losses.get(), d_dlogits.get(), d_logits.get(), d_targets.get(), 2, 10,
                      1.0f);
  const auto losses = d_losses.download();
  const auto dlogits = d_dlogits.download();
  EXPECT_EQ(losses[0], 0.0f);
  EXPECT_GT(losses[1], 0.0f);
  for (int j = 0; j < 10; ++j) EXPECT_EQ(dlogits[static_cast<size_t>(j)], 0.0f) << j;
}

// A NaN logit makes its row's loss and gradient NaN (never a finite loss that hides it), where a
// thread folds consecutive logits (V = 2048: aligned rows of whole chunks) and logits blockDim
// apart (V = 2049): row 0 has it among finite logits; row 1 beside −∞ only in its group in either
// layout (elements 1..7, and 256·k for k = 1..7), where fmaxf alone would pass over it; row 2
// stays finite.
TEST_F(CudaKernels, CrossEntropyNaNLogitIsNaNLoss) {
  for (int64_t V : {2048, 2049}) {
    SCOPED_TRACE("V=" + std::to_string(V));
    std::vector<float> logits = random_floats(3 * V, 16);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float minus_inf = -std::numeric_limits<float>::infinity();
    logits[37] = nan;
    for (int64_t j = 1; j < 8; ++j) logits[V + j] = logits[V + 256 * j] = minus_inf;
    logits[V] = nan;
    DeviceBuffer<float> d_logits(logits), d_losses(3), d_dlogits(3 * V);
    DeviceBuffer<int32_t> d_targets(std::vector<int32_t>{3, 50, 5});
    gpu_->cross_entropy(d_losses.get(), d_dlogits.get(), d_logits.get(), d_targets.get(), 3, V,
                        1.0f);
    const auto losses = d_losses.download();
    const auto dlogits = d_dlogits.download();
    EXPECT_TRUE(std::isnan(losses[0])) << losses[0];
    EXPECT_TRUE(std::isnan(losses[1])) << losses[1];
    EXPECT_TRUE(std::isfinite(losses[2])) << losses[2];
    EXPECT_TRUE(std::isnan(dlogits[static_cast<size_t>(V) + 50])) << "row 1's gradient";
  }
}

TEST_F(CudaKernels, CrossEntropyBadTargetIsNaN) {
  const std::vector<float> logits = random_floats(2 * 10, 16);
  DeviceBuffer<float> d_logits(logits), d_losses(2), d_dlogits(20);
  DeviceBuffer<int32_t> d_targets(std::vector<int32_t>{3, 10});
  gpu_->cross_entropy(d_losses.get(), d_dlogits.get(), d_logits.get(), d_targets.get(), 2, 10,
                      1.0f);
  const auto losses = d_losses.download();
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));
}

TEST_F(CudaKernels, AdamWMatchesCpuBitwise) {
  for (int64_t n : {1, 1000, 100003}) {
    for (int64_t step : {1, 10}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " step=" + std::to_string(step));
      AdamWHyper h;
      h.lr = 3e-4f, h.weight_decay = 0.1f, h.step = step, h.grad_scale = 0.7f;
      const auto master0 = random_floats(n, 17), grad = random_floats(n, 18);
      auto m0 = random_floats(n, 19, 0.1f), v0 = random_floats(n, 20, 0.1f);
      for (float& x : v0) x = x * x;
      std::vector<float> master = master0, m = m0, v = v0, out_f32(n);
      std::vector<bf16_t> out_bf16(n);
      cpu_.adamw(master.data(), m.data(), v.data(), grad.data(), out_bf16.data(), out_f32.data(), n,
                 h);
      DeviceBuffer<float> d_master(master0), d_m(m0), d_v(v0), d_grad(grad), d_f32(n);
      DeviceBuffer<bf16_t> d_bf16(n);
      gpu_->adamw(d_master.get(), d_m.get(), d_v.get(), d_grad.get(), d_bf16.get(), d_f32.get(), n,
                  h);
      EXPECT_TRUE(bitwise_equal(d_master.download(), master, "master"));
      EXPECT_TRUE(bitwise_equal(d_m.download(), m, "m"));
      EXPECT_TRUE(bitwise_equal(d_v.download(), v, "v"));
      EXPECT_TRUE(bitwise_equal(d_f32.download(), out_f32, "fp32 params"));
      EXPECT_TRUE(bitwise_equal(d_bf16.download(), out_bf16, "bf16 params"));
      // Shards that start `shift` elements into their buffers: 1 and 5 (every buffer off 16-byte
      // alignment: the first elements one by one, then 16-byte accesses), 4 (the fp32 buffers
      // aligned, the bf16 copy 8 bytes off); and the gradient one element further in than the
      // rest (misaligned to one another: element by element throughout). The same bits each time.
      for (const auto& [shift, grad_shift] :
           {std::pair<int64_t, int64_t>{1, 1}, {4, 4}, {5, 5}, {0, 1}}) {
        SCOPED_TRACE("shift " + std::to_string(shift) + ", gradient " + std::to_string(grad_shift));
        const auto shifted = [](const std::vector<float>& x, int64_t by) {
          std::vector<float> out(x.size() + static_cast<size_t>(by), 0.0f);
          std::copy(x.begin(), x.end(), out.begin() + by);
          return out;
        };
        DeviceBuffer<float> s_master(shifted(master0, shift)), s_m(shifted(m0, shift)),
            s_v(shifted(v0, shift)), s_grad(shifted(grad, grad_shift)), s_f32(n + shift);
        DeviceBuffer<bf16_t> s_bf16(n + shift);
        gpu_->adamw(s_master.get() + shift, s_m.get() + shift, s_v.get() + shift,
                    s_grad.get() + grad_shift, s_bf16.get() + shift, s_f32.get() + shift, n, h);
        const auto past_shift = [shift](auto x) {
          x.erase(x.begin(), x.begin() + shift);
          return x;
        };
        EXPECT_TRUE(bitwise_equal(past_shift(s_master.download()), master, "master, shifted"));
        EXPECT_TRUE(bitwise_equal(past_shift(s_f32.download()), out_f32, "fp32 params, shifted"));
        EXPECT_TRUE(bitwise_equal(past_shift(s_bf16.download()), out_bf16, "bf16 params, shifted"));
        EXPECT_TRUE(bitwise_equal(past_shift(s_m.download()), m, "m, shifted"));
        EXPECT_TRUE(bitwise_equal(past_shift(s_v.download()), v, "v, shifted"));
      }
    }
  }
}

TEST_F(CudaKernels, SumSquaresDeterministicAndClose) {
  for (int64_t n : {0, 1, 12345, 3000001}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto x = random_floats(n, 21);
    const double expected = cpu_.sum_squares(x.data(), n);
    DeviceBuffer<float> d_x(x);
    const double first = gpu_->sum_squares(d_x.get(), n);
    EXPECT_NEAR(first, expected, 1e-12 * std::max(1.0, expected));
    EXPECT_EQ(gpu_->sum_squares(d_x.get(), n), first);  // bitwise: same double
    DeviceBuffer<double> d_sum(1);                      // poisoned: NaN until written
    gpu_->sum_squares_to(d_sum.get(), d_x.get(), n);
    EXPECT_EQ(d_sum.download()[0], first);  // the same kernels, left on the device
  }
}

// The engine's gradient norm: every group's sum enqueued together (two launches per 64 sums)
// gives each the bits of its own sum_squares_to, past one batch (70 sums, some empty).
TEST_F(CudaKernels, SumSquaresEachIsEachOnesSumBitwise) {
  const int64_t lengths[] = {0, 1, 12345, 3000001, 1024, 7};
  const int count = 70;
  std::deque<DeviceBuffer<float>> xs;              // not movable: a deque keeps each in place
  DeviceBuffer<double> each(count), alone(count);  // poisoned: NaN until written
  std::vector<SquaresSum> sums;
  for (int i = 0; i < count; ++i) {
    const int64_t n = lengths[i % 6];
    xs.emplace_back(random_floats(n, 40 + i));
    sums.push_back({each.get() + i, xs.back().get(), n});
  }
  gpu_->sum_squares_each(sums);
  for (int i = 0; i < count; ++i)
    gpu_->sum_squares_to(alone.get() + i, sums[static_cast<size_t>(i)].x,
                         sums[static_cast<size_t>(i)].n);
  const std::vector<double> got = each.download(), want = alone.download();
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE("sum " + std::to_string(i));
    EXPECT_EQ(
        std::memcmp(&got[static_cast<size_t>(i)], &want[static_cast<size_t>(i)], sizeof(double)), 0)
        << got[static_cast<size_t>(i)] << " vs " << want[static_cast<size_t>(i)];
  }
}

// Marks on the backend's stream time what the stream did between them: a queue of GEMMs issued
// in microseconds takes the device far longer, and the interval is no longer than the host's
// wall time until the queue drained.
TEST_F(CudaKernels, EventTimelineTimesTheStreamNotTheIssue) {
  const int64_t n = 2048;
  DeviceBuffer<float> a(random_floats(n * n, 31)), b(random_floats(n * n, 32)), c(n * n);
  gpu_->synchronize();
  PhaseTimeline& timeline = gpu_->timeline();
  timeline.reset();
  const auto t0 = std::chrono::steady_clock::now();
  const auto begin = timeline.mark();
  for (int i = 0; i < 20; ++i) gpu_->matmul_forward(c.get(), a.get(), b.get(), n, n, n);
  const auto end = timeline.mark();
  const double issue_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  gpu_->synchronize();
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double device_s = timeline.seconds(begin, end);
  // 20 GEMMs of 2·2048³ = 17 GFLOP each: at least ~0.4 ms on any GPU below 1000 TFLOP/s.
  EXPECT_GT(device_s, 20 * 2.0 * n * n * n / 1e15);
  EXPECT_LE(device_s, wall_s);
  std::printf("[ timeline ] 20 GEMMs %lld³: issued in %.3f ms, device %.3f ms, wall %.3f ms\n",
              static_cast<long long>(n), issue_s * 1e3, device_s * 1e3, wall_s * 1e3);
  timeline.reset();
  EXPECT_THROW(timeline.seconds(begin, end), Error);  // marks of the last step are gone
}

// LoRA dropout: the CUDA kernel drops exactly the CPU's elements (one hash, backend/dropout_hash.h)
// and scales the kept ones alike, out of place and in place, past 2^32 element ids.
TEST_F(CudaKernels, DropoutMasksAreTheCpusBitwise) {
  const int64_t M = 37, K = 211;
  const auto x = random_floats(M * K, 31);
  const int64_t first_row = (int64_t{1} << 32) / K + 5;  // element ids past 32 bits
  std::vector<float> y(M * K), inplace = x;
  cpu_.dropout_forward(y.data(), x.data(), M, K, 0.3f, 0x1234abcdull, first_row);
  cpu_.dropout_forward(inplace.data(), inplace.data(), M, K, 0.3f, 0x1234abcdull, first_row);
  DeviceBuffer<float> d_x(x), d_y(M * K), d_inplace(x);
  gpu_->dropout_forward(d_y.get(), d_x.get(), M, K, 0.3f, 0x1234abcdull, first_row);
  gpu_->dropout_forward(d_inplace.get(), d_inplace.get(), M, K, 0.3f, 0x1234abcdull, first_row);
  EXPECT_TRUE(bitwise_equal(d_y.download(), y, "dropout_forward"));
  EXPECT_TRUE(bitwise_equal(d_inplace.download(), inplace, "dropout_forward in place"));
  int64_t dropped = 0;
  for (float v : y) dropped += v == 0.0f ? 1 : 0;
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(M * K), 0.3, 0.03);
}

// DoRA's ops (backend.h): the row norms of W + s·B·A, the column scaling (accumulated and not, the
// factor m/n + offset) and the magnitude's gradient, against the CPU backend; fp32 sums in
// another order, so within kFp32Tolerance, and the same bits on a second run.
TEST_F(CudaKernels, DoraOpsMatchTheCpu) {
  const int64_t M = 67, N = 96, r = 4, K = 130;
  const float s = 0.75f;
  const auto w = random_floats(N * K, 41), b = random_floats(N * r, 42),
             a = random_floats(r * K, 43);
  const auto x = random_floats(M * N, 44), y0 = random_floats(M * N, 45);
  const auto dy = random_floats(M * N, 46), dm0 = random_floats(N, 47);
  std::vector<float> magnitude = random_floats(N, 48);
  for (float& m : magnitude) m = 2.0f + m;  // positive, as row norms start
  std::vector<float> norms(N), added = y0, scaled(M * N), dm = dm0;
  cpu_.dora_weight_norms(norms.data(), w.data(), b.data(), a.data(), s, N, r, K, DType::kFloat32);
  cpu_.dora_scale_columns(added.data(), x.data(), magnitude.data(), norms.data(), -1.0f, M, N,
                          true);
  cpu_.dora_scale_columns(scaled.data(), x.data(), magnitude.data(), norms.data(), 0.0f, M, N,
                          false);
  cpu_.dora_magnitude_grad(dm.data(), dy.data(), x.data(), norms.data(), M, N);
  DeviceBuffer<float> d_w(w), d_b(b), d_a(a), d_x(x), d_dy(dy), d_m(magnitude);
  std::vector<float> first_dm;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer<float> d_norms(N), d_added(y0), d_scaled(M * N), d_dm(dm0);
    gpu_->dora_weight_norms(d_norms.get(), d_w.get(), d_b.get(), d_a.get(), s, N, r, K,
                            DType::kFloat32);
    EXPECT_TRUE(close(d_norms.download(), norms, kFp32Tolerance, "norms"));
    // The same norms on both sides from here, so that each op is compared alone.
    DeviceBuffer<float> d_cpu_norms(norms);
    gpu_->dora_scale_columns(d_added.get(), d_x.get(), d_m.get(), d_cpu_norms.get(), -1.0f, M, N,
                             true);
    gpu_->dora_scale_columns(d_scaled.get(), d_x.get(), d_m.get(), d_cpu_norms.get(), 0.0f, M, N,
                             false);
    gpu_->dora_magnitude_grad(d_dm.get(), d_dy.get(), d_x.get(), d_cpu_norms.get(), M, N);
    EXPECT_TRUE(close(d_added.download(), added, kFp32Tolerance, "scale_columns +="));
    EXPECT_TRUE(close(d_scaled.download(), scaled, kFp32Tolerance, "scale_columns ="));
    EXPECT_TRUE(close(d_dm.download(), dm, kFp32Tolerance, "magnitude_grad"));
    if (run == 0)
      first_dm = d_dm.download();
    else
      EXPECT_TRUE(bitwise_equal(d_dm.download(), first_dm, "magnitude_grad run 2"));
  }
  // Norms rounded to a bf16 magnitude's type: bf16 values, each within a bf16 step of the CPU's.
  std::vector<float> norms16(N);
  cpu_.dora_weight_norms(norms16.data(), w.data(), b.data(), a.data(), s, N, r, K, DType::kBf16);
  DeviceBuffer<float> d_norms16(N);
  gpu_->dora_weight_norms(d_norms16.get(), d_w.get(), d_b.get(), d_a.get(), s, N, r, K,
                          DType::kBf16);
  const std::vector<float> gpu_norms16 = d_norms16.download();
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_EQ(bf16_to_float(float_to_bf16(gpu_norms16[n])), gpu_norms16[n]) << n;
    EXPECT_NEAR(gpu_norms16[n], norms16[n], norms16[n] / 128) << n;
  }
}

TEST_F(CudaKernels, ElementwiseHelpers) {
  const int64_t n = 5003;
  auto x = random_floats(n, 22), y0 = random_floats(n, 23);
  // bf16 edge cases: a tie to even, the largest finite, infinities, NaN, a subnormal.
  x[0] = 1.00390625f;
  x[1] = std::numeric_limits<float>::max();
  x[2] = std::numeric_limits<float>::infinity();
  x[3] = -std::numeric_limits<float>::infinity();
  x[4] = std::numeric_limits<float>::quiet_NaN();
  x[5] = 1e-40f;
  std::vector<float> y = y0, scaled = y0, back(n);
  std::vector<bf16_t> bf(n);
  cpu_.add_inplace(y.data(), x.data(), n);
  cpu_.scale_inplace(scaled.data(), -1.5f, n);
  cpu_.to_bf16(bf.data(), x.data(), n);
  cpu_.from_bf16(back.data(), bf.data(), n);
  DeviceBuffer<float> d_x(x), d_y(y0), d_scaled(y0), d_back(n), d_zero(random_floats(n, 24));
  DeviceBuffer<bf16_t> d_bf(n);
  gpu_->add_inplace(d_y.get(), d_x.get(), n);
  gpu_->scale_inplace(d_scaled.get(), -1.5f, n);
  gpu_->to_bf16(d_bf.get(), d_x.get(), n);
  gpu_->from_bf16(d_back.get(), d_bf.get(), n);
  gpu_->zero(d_zero.get(), n);
  // Exact values; NaN only as NaN (the GPU returns the canonical NaN, the CPU the input's payload).
  EXPECT_TRUE(close(d_y.download(), y, 0.0, "add_inplace"));
  EXPECT_TRUE(close(d_scaled.download(), scaled, 0.0, "scale_inplace"));
  EXPECT_TRUE(bitwise_equal(d_bf.download(), bf, "to_bf16"));
  EXPECT_TRUE(bitwise_equal(d_back.download(), back, "from_bf16"));
  EXPECT_TRUE(bitwise_equal(d_zero.download(), std::vector<float>(n, 0.0f), "zero"));
}

}  // namespace
}  // namespace zt::gpu_test

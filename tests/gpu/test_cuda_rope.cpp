// RoPE on the CUDA backend against the CPU backend, bit for bit: one tensor, and a layer's q and
// k in one launch, with and without document masks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_kernels_fixture.h"
#include "gpu_test_util.h"

namespace zt::gpu_test {
namespace {

// The rotations the RoPE tests run: plain, scaled (linear, Llama 3), partial (Phi-4-mini's) and
// GLM's interleaved pairs.
static std::vector<RopeSpec> rope_specs() {
  RopeSpec linear = RopeSpec::unscaled(10000.0f);
  linear.scaling.type = RopeScaling::kLinear;
  linear.scaling.factor = 4.0;
  RopeSpec llama3 = RopeSpec::unscaled(500000.0f);
  llama3.scaling.type = RopeScaling::kLlama3;
  llama3.scaling.factor = 8.0;
  llama3.scaling.original_max_positions = 64;  // low/high_freq_factor 1 and 4: Llama 3.1's
  // Phi-4-mini's partial rotation: 12 leading elements (6 pairs: not whole chunks) and 48.
  RopeSpec partial12 = RopeSpec::unscaled(10000.0f), partial16 = partial12, partial48 = partial12;
  partial12.rotary_dims = 12;
  partial16.rotary_dims = 16;  // whole chunks in heads of 18, which are not: the row stride
  partial48.rotary_dims = 48;
  // GLM's: the leading half of each head in adjacent pairs (never chunked), and a whole head so.
  RopeSpec glm16 = partial16, interleaved = RopeSpec::unscaled(10000.0f);
  glm16.interleaved = interleaved.interleaved = true;
  return {glm16,
          interleaved,
          RopeSpec::unscaled(10000.0f),
          RopeSpec::unscaled(500000.0f),
          linear,
          llama3,
          partial12,
          partial16,
          partial48};
}

TEST_F(CudaKernels, RopeMatchesCpuBitwise) {
  // hd = 18 with 16 rotated: whole chunks of pairs in heads that are not (the row stride).
  const int64_t shapes[][4] = {
      {1, 1, 1, 2}, {2, 37, 3, 16}, {1, 130, 2, 64}, {2, 5, 4, 128}, {1, 3, 2, 18}};
  for (const RopeSpec& rope : rope_specs()) {
    for (const auto& s : shapes) {
      const int64_t B = s[0], T = s[1], H = s[2], hd = s[3];
      if (rope.rotary_dims > hd) continue;
      SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) +
                   " H=" + std::to_string(H) + " hd=" + std::to_string(hd));
      const auto x = random_floats(B * T * H * hd, 6);
      std::vector<float> fwd = x, bwd = x;
      cpu_.rope_forward(fwd.data(), B, T, H, hd, rope);
      cpu_.rope_backward(bwd.data(), B, T, H, hd, rope);
      DeviceBuffer<float> d_fwd(x), d_bwd(x);
      gpu_->rope_forward(d_fwd.get(), B, T, H, hd, rope);
      gpu_->rope_backward(d_bwd.get(), B, T, H, hd, rope);
      EXPECT_TRUE(bitwise_equal(d_fwd.download(), fwd, "rope forward"));
      EXPECT_TRUE(bitwise_equal(d_bwd.download(), bwd, "rope backward"));
      // With document masks: positions restart at each document, on both backends.
      const std::vector<int32_t> starts = periodic_doc_starts(B, T);
      DeviceBuffer<int32_t> d_starts(starts);
      std::vector<float> masked_fwd = x, masked_bwd = x;
      cpu_.rope_forward(masked_fwd.data(), B, T, H, hd, rope, starts.data());
      cpu_.rope_backward(masked_bwd.data(), B, T, H, hd, rope, starts.data());
      DeviceBuffer<float> d_masked_fwd(x), d_masked_bwd(x);
      gpu_->rope_forward(d_masked_fwd.get(), B, T, H, hd, rope, d_starts.get());
      gpu_->rope_backward(d_masked_bwd.get(), B, T, H, hd, rope, d_starts.get());
      EXPECT_TRUE(bitwise_equal(d_masked_fwd.download(), masked_fwd, "masked rope forward"));
      EXPECT_TRUE(bitwise_equal(d_masked_bwd.download(), masked_bwd, "masked rope backward"));
    }
  }
}

// A layer's q and k rotated in one launch (rope_forward_qk, rope_backward_qk: k's pairs after
// q's, with its own head count) give each tensor the bits of its own call on the CPU, with and
// without document masks; k one element into its buffer (not 16-byte aligned) takes the launch
// element by element, with the same bits.
TEST_F(CudaKernels, RopeOfQAndKInOneLaunchIsEachOnesBitwise) {
  const int64_t shapes[][5] = {
      {1, 1, 1, 1, 2}, {2, 37, 4, 1, 16}, {1, 130, 6, 2, 64}, {2, 5, 4, 4, 128}, {1, 3, 2, 1, 18}};
  for (const RopeSpec& rope : rope_specs()) {
    for (const auto& s : shapes) {
      const int64_t B = s[0], T = s[1], H = s[2], Hkv = s[3], hd = s[4];
      if (rope.rotary_dims > hd) continue;
      for (const int64_t k_offset : {0, 1})
        for (const bool masked : {false, true}) {
          SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) +
                       " H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) +
                       " hd=" + std::to_string(hd) + " k offset " + std::to_string(k_offset) +
                       (masked ? " masked" : ""));
          const std::vector<int32_t> starts = periodic_doc_starts(B, T);
          const int32_t* host_starts = masked ? starts.data() : nullptr;
          DeviceBuffer<int32_t> d_starts(starts);
          const int32_t* device_starts = masked ? d_starts.get() : nullptr;
          const auto q = random_floats(B * T * H * hd, 6);
          const auto k = random_floats(B * T * Hkv * hd + k_offset, 7);
          for (const float sign : {1.0f, -1.0f}) {
            std::vector<float> want_q = q, want_k = k;
            DeviceBuffer<float> d_q(q), d_k(k);
            float* kk = d_k.get() + k_offset;
            if (sign > 0) {
              cpu_.rope_forward(want_q.data(), B, T, H, hd, rope, host_starts);
              cpu_.rope_forward(want_k.data() + k_offset, B, T, Hkv, hd, rope, host_starts);
              gpu_->rope_forward_qk(d_q.get(), kk, B, T, H, Hkv, hd, rope, device_starts);
            } else {
              cpu_.rope_backward(want_q.data(), B, T, H, hd, rope, host_starts);
              cpu_.rope_backward(want_k.data() + k_offset, B, T, Hkv, hd, rope, host_starts);
              gpu_->rope_backward_qk(d_q.get(), kk, B, T, H, Hkv, hd, rope, device_starts);
            }
            const char* pass = sign > 0 ? "forward" : "backward";
            EXPECT_TRUE(bitwise_equal(d_q.download(), want_q, pass));
            EXPECT_TRUE(bitwise_equal(d_k.download(), want_k, pass));
          }
        }
    }
  }
}

}  // namespace
}  // namespace zt::gpu_test

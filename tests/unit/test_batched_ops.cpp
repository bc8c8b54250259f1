// The backend ops that let a device backend fuse or batch what the model used to issue one by
// one (backend.h): batched linear layers of one input (on the CPU bit for bit the single ones, in
// fp32 and bf16 storage) and a linear layer onto a residual (the sum rounded once). Also
// backend/gemm_batch.h's stride rule, which decides when the CUDA backend may issue one
// strided-batched GEMM, case by case and on the model's real layouts. (The CUDA overrides are
// compared with these in tests/gpu.)
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "backend/gemm_batch.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/llama.h"
#include "test_cpu_backend_support.h"
#include "util/bf16.h"
#include "util/error.h"

namespace zt {
namespace {

using test::random_normal;

std::optional<int64_t> stride_of(std::initializer_list<const void*> pointers, size_t element,
                                 int64_t min_stride) {
  const std::vector<const void*> list(pointers);
  return even_stride(list, element, min_stride);
}

TEST(GemmBatch, EvenStrideAcceptsEvenlySpacedIncreasingWholeElements) {
  std::vector<float> buffer(64);
  const float* b = buffer.data();
  EXPECT_EQ(stride_of({b, b + 10, b + 20}, sizeof(float), 10), 10);
  EXPECT_EQ(stride_of({b + 3, b + 50}, sizeof(float), 1), 47);  // two are always even
  EXPECT_EQ(stride_of({b}, sizeof(float), 16), 0);              // a batch of one
}

TEST(GemmBatch, EvenStrideRefusesWhatOneStridedBatchCannotAddress) {
  std::vector<float> buffer(64);
  const float* b = buffer.data();
  const auto* bytes = reinterpret_cast<const std::byte*>(b);
  EXPECT_FALSE(stride_of({b, b + 10, b + 21}, sizeof(float), 1));  // uneven
  EXPECT_FALSE(stride_of({b + 10, b}, sizeof(float), 1));          // decreasing
  EXPECT_FALSE(stride_of({b, b}, sizeof(float), 0));               // the same matrix twice
  EXPECT_FALSE(stride_of({b, bytes + 6}, sizeof(float), 1));       // not a whole element
  EXPECT_FALSE(stride_of({b, b + 8}, sizeof(float), 9));           // outputs would overlap
  EXPECT_FALSE(stride_of({b, nullptr}, sizeof(float), 1));
  EXPECT_FALSE(stride_of({}, sizeof(float), 1));
}

// Bits of n elements of a view, for bitwise comparison whatever the storage type.
std::vector<std::byte> bits_of(const void* p, int64_t n, DType dtype) {
  const auto* b = static_cast<const std::byte*>(p);
  return std::vector<std::byte>(b, b + n * static_cast<int64_t>(dtype_size(dtype)));
}

// Activations and weights of `n` elements in `dtype` (fp32 or bf16), filled from normals.
struct Stored {
  std::vector<float> f32;
  std::vector<bf16_t> b16;
  DType dtype;
  Stored(int64_t n, uint32_t seed, DType d) : f32(random_normal(n, seed)), dtype(d) {
    if (d == DType::kBf16)
      for (float v : f32) b16.push_back(float_to_bf16(v));
  }
  TensorView view() {
    return dtype == DType::kBf16 ? TensorView(b16.data()) : TensorView(f32.data());
  }
  std::vector<std::byte> bits(int64_t n) const {
    return dtype == DType::kBf16 ? bits_of(b16.data(), n, dtype) : bits_of(f32.data(), n, dtype);
  }
};

class BatchedOps : public ::testing::TestWithParam<DType> {};

// Each output of the batch is what matmul_forward gives for that weight alone, bit for bit (the
// weights of one batch are evenly spaced in one buffer, as a layer's group buffer holds them).
TEST_P(BatchedOps, MatmulForwardBatchIsEachMatmulForward) {
  auto be = make_cpu_backend();
  const int64_t M = 37, N = 24, K = 19;
  Stored x(M * K, 1, GetParam()), weights(3 * N * K, 2, GetParam());
  std::vector<Stored> batched, alone;
  for (int i = 0; i < 3; ++i) {
    batched.emplace_back(M * N, 10 + i, GetParam());
    alone.emplace_back(M * N, 20 + i, GetParam());
  }
  const TensorView ys[] = {batched[0].view(), batched[1].view(), batched[2].view()};
  const ConstTensorView ws[] = {weights.view(), weights.view().at(N * K),
                                weights.view().at(2 * N * K)};
  be->matmul_forward_batch(ys, x.view(), ws, 3, M, N, K);
  for (int i = 0; i < 3; ++i) {
    be->matmul_forward(alone[i].view(), x.view(), ws[i], M, N, K);
    EXPECT_EQ(batched[i].bits(M * N), alone[i].bits(M * N)) << "output " << i;
  }
}

// dW_i += dy_iᵀ·x for each trainable weight, exactly as matmul_backward's dw; a null gradient
// (a frozen weight) is skipped, and the others still accumulate onto what they held.
TEST_P(BatchedOps, MatmulWeightGradBatchAccumulatesEachAndSkipsFrozen) {
  auto be = make_cpu_backend();
  const int64_t M = 29, N = 16, K = 21;
  Stored x(M * K, 3, GetParam()), dy0(M * N, 4, GetParam()), dy1(M * N, 5, GetParam());
  const std::vector<float> start = random_normal(N * K, 6);
  std::vector<float> batched0 = start, batched1 = start, alone0 = start, alone1 = start;
  float* const dws[] = {batched0.data(), nullptr};
  const ConstTensorView dys[] = {dy0.view(), dy1.view()};
  be->matmul_weight_grad_batch(dws, dys, x.view(), 2, M, N, K, GradWrite::kAdd);
  be->matmul_backward(TensorView(), alone0.data(), dy0.view(), x.view(), ConstTensorView(), M, N, K,
                      false, GradWrite::kAdd);
  EXPECT_EQ(batched0, alone0);
  EXPECT_NE(batched0, start);
  EXPECT_EQ(batched1, start);  // frozen: untouched
  float* const both[] = {batched0.data(), batched1.data()};
  be->matmul_weight_grad_batch(both, dys, x.view(), 2, M, N, K, GradWrite::kAdd);
  be->matmul_backward(TensorView(), alone0.data(), dy0.view(), x.view(), ConstTensorView(), M, N, K,
                      false, GradWrite::kAdd);
  be->matmul_backward(TensorView(), alone1.data(), dy1.view(), x.view(), ConstTensorView(), M, N, K,
                      false, GradWrite::kAdd);
  EXPECT_EQ(batched0, alone0);
  EXPECT_EQ(batched1, alone1);
}

// y = residual + x·wᵀ: the fp32 product plus the widened residual, rounded once. In fp32 that is
// matmul_forward then add_inplace bit for bit; in bf16 it is the single rounding of that fp32
// sum, which differs from rounding the product first (matmul_forward then add_inplace) in some
// elements, so the test tells one rounding from two.
TEST_P(BatchedOps, MatmulForwardAddRoundsTheSumOnce) {
  auto be = make_cpu_backend();
  const int64_t M = 23, N = 40, K = 33;
  Stored x(M * K, 12, GetParam()), w(N * K, 13, GetParam()), residual(M * N, 14, GetParam());
  Stored fused(M * N, 15, GetParam()), twice(M * N, 16, GetParam());
  be->matmul_forward_add(fused.view(), x.view(), w.view(), residual.view(), M, N, K);
  be->matmul_forward(twice.view(), x.view(), w.view(), M, N, K);
  be->add_inplace(twice.view(), residual.view(), M * N);
  if (GetParam() == DType::kFloat32) {
    EXPECT_EQ(fused.bits(M * N), twice.bits(M * N));
  } else {
    // The fp32 product of the same (widened) values, then the sum rounded once.
    auto widened = [](const Stored& s) {
      std::vector<float> out;
      for (bf16_t b : s.b16) out.push_back(bf16_to_float(b));
      return out;
    };
    const std::vector<float> x32 = widened(x), w32 = widened(w), r32 = widened(residual);
    std::vector<float> product(M * N);
    be->matmul_forward(product.data(), x32.data(), w32.data(), M, N, K);
    int64_t double_rounding_differs = 0;
    for (int64_t i = 0; i < M * N; ++i) {
      ASSERT_EQ(fused.b16[i], float_to_bf16(product[i] + r32[i])) << i;
      if (twice.b16[i] != fused.b16[i]) ++double_rounding_differs;
    }
    EXPECT_GT(double_rounding_differs, 0) << "no element tells one rounding from two";
  }
  EXPECT_THROW(
      be->matmul_forward_add(residual.view(), x.view(), w.view(), residual.view(), M, N, K), Error);
}

// The batches the layer issues are evenly spaced in the real layouts, so that the CUDA backend
// can run each as one strided GEMM rather than fall back: q/k/v outputs (GQA: k/v) and their
// output gradients as carve_activation_arena lays them out (carved from a fake base: only the
// addresses matter), gate/up, and the weights and gradients at their layout offsets.
TEST_P(BatchedOps, ModelBatchesAreEvenlySpaced) {
  struct Case {
    const char* name;
    int64_t kv_heads;
    bool qk_norm;
  };
  for (const Case& k : {Case{"GQA", 2, false}, Case{"MHA", 4, false},
                        Case{"GQA q/k norms", 2, true}, Case{"MHA q/k norms", 4, true}}) {
    SCOPED_TRACE(k.name);
    ModelConfig c = preset_config("tiny");
    c.num_kv_heads = k.kv_heads;
    c.qk_norm = k.qk_norm;
    c.validate();
    const int64_t B = 2, T = 8, M = B * T, D = c.hidden_size, KV = c.kv_dim(),
                  F = c.intermediate_size;
    const bool mha = c.q_dim() == KV;
    ActivationTensors t;
    carve_activation_arena(c, B, T, ActivationCheckpointing{}, M, GetParam(),
                           reinterpret_cast<std::byte*>(uintptr_t{1} << 20), nullptr, t);
    const size_t e = dtype_size(GetParam());
    for (const LayerActivations& a : t.layers) {
      const TensorView q_out = k.qk_norm ? a.q_raw : a.q, k_out = k.qk_norm ? a.k_raw : a.k;
      EXPECT_TRUE(even_stride(std::vector<const void*>{k_out.data, a.v.data}, e, M * KV));
      if (mha) {
        EXPECT_TRUE(
            even_stride(std::vector<const void*>{q_out.data, k_out.data, a.v.data}, e, M * KV));
      }
      EXPECT_TRUE(even_stride(std::vector<const void*>{a.gate.data, a.up.data}, e, M * F));
    }
    // The weight-gradient batches read: k's output gradient (in datt with q/k norms) and dv;
    // dq, dk, dv when q joins (MHA without q/k norms).
    const void* dk = k.qk_norm ? t.datt.data : t.dk.data;
    EXPECT_TRUE(even_stride(std::vector<const void*>{dk, t.dv.data}, e, 1));
    if (mha && !k.qk_norm) {
      EXPECT_TRUE(even_stride(std::vector<const void*>{t.dq.data, t.dk.data, t.dv.data}, e, 1));
    }
    EXPECT_TRUE(even_stride(std::vector<const void*>{t.dgate.data, t.dup.data}, e, 1));
    // Weights (and gradients, at the same offsets) of layer 0's group.
    const ParamLayout layout(c);
    auto at = [&](TensorRole r) {
      return reinterpret_cast<const void*>((uintptr_t{1} << 20) +
                                           layout.tensor(r, 0).offset * sizeof(float));
    };
    EXPECT_TRUE(
        even_stride(std::vector<const void*>{at(TensorRole::kKProj), at(TensorRole::kVProj)},
                    sizeof(float), KV * D));
    if (mha) {
      EXPECT_TRUE(
          even_stride(std::vector<const void*>{at(TensorRole::kQProj), at(TensorRole::kKProj),
                                               at(TensorRole::kVProj)},
                      sizeof(float), KV * D));
    }
    EXPECT_TRUE(
        even_stride(std::vector<const void*>{at(TensorRole::kGateProj), at(TensorRole::kUpProj)},
                    sizeof(float), F * D));
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, BatchedOps, ::testing::Values(DType::kFloat32, DType::kBf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace zt

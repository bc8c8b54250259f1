// --gemm-algorithms timed on the device (backend/gemm_tuning.h, LtGemm::time_algorithms): the
// fingerprint kernel is the host fingerprint, and a backend that times its GEMMs' algorithms
// computes the bits of one that takes cuBLASLt's heuristic's first choice, for the linear
// layer's GEMMs in fp32 and bf16 storage; the tally counts every shape once.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "backend/gemm_tuning.h"
#include "gpu_test_util.h"

namespace zt::gpu_test {
namespace {

// The kernel's three sums against the host's, with and without a baseline C.
template <typename T>
void check_fingerprint(const std::vector<T>& host, const std::vector<T>& c, DType type) {
  const int64_t rows = 37, cols = 45, ld = 48, batch = 3, stride = 37 * 48 + 5;
  ASSERT_GE(host.size(), static_cast<size_t>(batch * stride));
  DeviceBuffer<T> data(host), baseline(c);
  for (const bool with_baseline : {false, true}) {
    DeviceBuffer<unsigned long long> slot(std::vector<unsigned long long>(3, 0));
    cuda::launch_fingerprint(slot.get(), data.get(), with_baseline ? baseline.get() : nullptr, type,
                             rows, cols, ld, batch, stride, nullptr);
    const GemmFingerprint expected = gemm_output_fingerprint(
        host.data(), with_baseline ? c.data() : nullptr, type, rows, cols, ld, batch, stride);
    const std::vector<unsigned long long> device = slot.download();
    EXPECT_EQ(device[0], expected.hash) << with_baseline;
    EXPECT_EQ(device[1], expected.finite_changed) << with_baseline;
    EXPECT_EQ(device[2], expected.non_finite) << with_baseline;
  }
}

// Random values with zeros, infinities and a NaN among them, so that all three sums count.
TEST(CudaGemmTuning, TheFingerprintKernelIsTheHostFingerprint) {
  std::vector<float> values = random_floats(3 * (37 * 48 + 5), 71);
  for (size_t i = 0; i < values.size(); i += 97) values[i] = 0.0f;
  values[5] = std::numeric_limits<float>::infinity();
  values[48 * 7 + 3] = std::nanf("");
  std::vector<float> c = values;  // C equal to the output in every other element
  for (size_t i = 0; i < c.size(); i += 2) c[i] += 1.0f;
  check_fingerprint(values, c, DType::kFloat32);
  check_fingerprint(Stored16Tensor<DType::kBf16>::bits_of(values),
                    Stored16Tensor<DType::kBf16>::bits_of(c), DType::kBf16);
  check_fingerprint(Stored16Tensor<DType::kFloat16>::bits_of(values),
                    Stored16Tensor<DType::kFloat16>::bits_of(c), DType::kFloat16);
}

// The linear layer's GEMMs on one backend: y = x·wᵀ (β = 0: timed), dx = dy·w (timed),
// dw += dyᵀ·x (accumulates in place: the heuristic's choice, untimed), y2 = r + x·wᵀ (C read
// from the residual: timed). Returns every output's bits.
template <typename Storage>
std::vector<std::vector<uint16_t>> linear_outputs(cuda::CudaBackend& gpu, int64_t M, int64_t N,
                                                  int64_t K, Storage make, uint64_t seed,
                                                  bool zero_weight = false) {
  auto x = make(random_floats(M * K, seed)),
       w = make(zero_weight ? std::vector<float>(N * K, 0.0f) : random_floats(N * K, seed + 1)),
       dy = make(random_floats(M * N, seed + 2)), r = make(random_floats(M * N, seed + 3));
  auto y = make(std::vector<float>(M * N)), y2 = make(std::vector<float>(M * N)),
       dx = make(std::vector<float>(M * K));
  DeviceBuffer<float> dw(random_floats(N * K, seed + 4));
  gpu.matmul_forward(y.gpu_view(), x.gpu_view(), w.gpu_view(), M, N, K);
  gpu.matmul_backward(dx.gpu_view(), dw.get(), dy.gpu_view(), x.gpu_view(), w.gpu_view(), M, N, K,
                      false, GradWrite::kAdd);
  gpu.matmul_forward_add(y2.gpu_view(), x.gpu_view(), w.gpu_view(), r.gpu_view(), M, N, K);
  gpu.synchronize();
  const auto bits = [](const auto& t) {
    const auto raw = t.device.download();
    const auto* p = reinterpret_cast<const uint16_t*>(raw.data());
    return std::vector<uint16_t>(p, p + raw.size() * sizeof(raw[0]) / 2);
  };
  const std::vector<float> dw_host = dw.download();
  const auto* dw_bits = reinterpret_cast<const uint16_t*>(dw_host.data());
  return {bits(y), bits(dx), bits(y2),
          std::vector<uint16_t>(dw_bits, dw_bits + dw_host.size() * 2)};
}

// fp32 storage as a device tensor with the Stored16Tensor interface the helper reads.
struct Fp32Tensor {
  DeviceBuffer<float> device;
  explicit Fp32Tensor(const std::vector<float>& values) : device(values) {}
  TensorView gpu_view() { return {device.get(), DType::kFloat32}; }
};

// Each pass draws other operands: the second runs the algorithms chosen on the first pass's
// operands on new ones, where an algorithm that only matched by chance would show. The shapes
// give bf16 outputs of 2^21 elements and more (the evidence bf16 needs, gemm_evidence_needed)
// and smaller ones (never compared). A shape first seen with a zero weight (LoRA's B before its
// first update) gives zeros, or C, in every summation order: it keeps the heuristic's choice, and
// later calls with a real weight still match.
TEST(CudaGemmTuning, TimedComputesTheHeuristicsBits) {
  auto heuristic = make_cuda_backend(0, test_options(cuda::GemmCompute::kBf16TensorCores));
  auto timed = make_cuda_backend(0, test_options(cuda::GemmCompute::kBf16TensorCores));
  timed->time_gemm_algorithms();
  EXPECT_FALSE(heuristic->gemm_tuning_report().has_value());
  const auto fp32 = [](const std::vector<float>& v) { return Fp32Tensor(v); };
  const auto bf16 = [](const std::vector<float>& v) { return Stored16Tensor<DType::kBf16>(v); };
  const int64_t shapes[][3] = {{4096, 2048, 1024}, {1024, 768, 2048}, {130, 70, 45}};
  for (uint64_t pass = 0; pass < 2; ++pass) {
    for (const auto& s : shapes) {
      const int64_t M = s[0], N = s[1], K = s[2];
      SCOPED_TRACE("pass " + std::to_string(pass) + " M=" + std::to_string(M) +
                   " N=" + std::to_string(N) + " K=" + std::to_string(K));
      const uint64_t seed = 81 + 10 * pass;
      EXPECT_EQ(linear_outputs(*timed, M, N, K, fp32, seed),
                linear_outputs(*heuristic, M, N, K, fp32, seed));
      EXPECT_EQ(linear_outputs(*timed, M, N, K, bf16, seed),
                linear_outputs(*heuristic, M, N, K, bf16, seed));
    }
  }
  const GemmTuningReport before_zero = timed->gemm_tuning_report().value();
  for (const bool zero_weight : {true, false}) {  // fp32, a shape of its own, first with w = 0
    SCOPED_TRACE(zero_weight ? "w = 0" : "w random");
    EXPECT_EQ(linear_outputs(*timed, 384, 1536, 512, fp32, 101, zero_weight),
              linear_outputs(*heuristic, 384, 1536, 512, fp32, 101, zero_weight));
  }
  const GemmTuningReport report = timed->gemm_tuning_report().value();
  std::cout << "[ gemm tuning ] " << report.summary() << "\n";
  EXPECT_GE(report.in_place, 1);  // dw +=
  EXPECT_GE(before_zero.timed, 1);
  EXPECT_EQ(report.unreproducible, 0);
  // y = x·0, dx = dy·0 and y2 = r + x·0: the product changed nothing (dw += is in place); a
  // shape for which the heuristic offers one algorithm is not tried at all.
  EXPECT_EQ(report.uninformative - before_zero.uninformative + report.single_candidate -
                before_zero.single_candidate,
            3);
  // The real weight planned nothing new: each shape was tried once, at its first call.
  EXPECT_EQ(report.shapes - before_zero.shapes, 4);
}

}  // namespace
}  // namespace zt::gpu_test

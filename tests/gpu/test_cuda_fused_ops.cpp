// The CUDA backend's fused and batched ops (backend.h) against the unfused ones and the CPU:
// - matmul_forward_batch / matmul_weight_grad_batch as one strided-batched cuBLASLt GEMM (evenly
//   spaced operands) and as single GEMMs (the fallback), each output within the GEMM tests'
//   tolerance of the CPU backend and bitwise equal on a second run;
// - matmul_forward_add (one GEMM with β = 1 onto the residual) bitwise the CPU's single rounding
//   of the fp32 sum (exact integer inputs), in bf16, fp16 and fp32 storage;
// - the elementwise kernels in 16-byte chunks (aligned tensors) bitwise equal to the same kernels
//   one element at a time (the same tensors one element off alignment), tails included.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_gemm.h"
#include "gpu_test_util.h"

namespace zt::gpu_test {
namespace {

using cuda::GemmCompute;

class CudaBatchedGemm : public ::testing::TestWithParam<GemmCompute> {
 protected:
  cpu::CpuBackend cpu_;
  std::unique_ptr<cuda::CudaBackend> gpu_ = make_cuda_backend(0, test_options(GetParam()));
};

TEST_P(CudaBatchedGemm, ForwardAndWeightGradMatchCpuBatchedOrNot) {
  const double rtol = tolerance(GetParam());
  const int64_t M = 37, N = 48, K = 64, count = 3;
  const auto x = random_floats(M * K, 51), w = random_floats(count * N * K, 52),
             dy = random_floats(count * M * N, 53), dw0 = random_floats(count * N * K, 54);
  std::vector<float> y(count * M * N), dw = dw0;
  for (int64_t i = 0; i < count; ++i) {
    cpu_.matmul_forward(y.data() + i * M * N, x.data(), w.data() + i * N * K, M, N, K);
    if (i != 1)  // weight 1 is frozen below
      cpu_.matmul_backward(nullptr, dw.data() + i * N * K, dy.data() + i * M * N, x.data(), nullptr,
                           M, N, K, false, GradWrite::kAdd);
  }
  DeviceBuffer<float> d_x(x), d_w(w), d_dy(dy);
  // evenly spaced outputs: one strided batch; outputs in reverse order: single GEMMs.
  for (bool reversed : {false, true}) {
    SCOPED_TRACE(reversed ? "single GEMMs (outputs in decreasing order)" : "one strided batch");
    // Slot count-1-i starts from weight i's dw0 block when reversed, so it ends as the CPU's dw_i.
    std::vector<float> dw_start = dw0;
    if (reversed)
      for (int64_t i = 0; i < count; ++i)
        std::copy_n(dw0.begin() + i * N * K, N * K, dw_start.begin() + (count - 1 - i) * N * K);
    DeviceBuffer<float> d_y(count * M * N), d_dw(dw_start);
    TensorView ys[count];
    ConstTensorView ws[count], dys[count];
    float* dws[count];
    for (int64_t i = 0; i < count; ++i) {
      const int64_t slot = reversed ? count - 1 - i : i;
      ys[i] = d_y.get() + slot * M * N;
      ws[i] = d_w.get() + i * N * K;
      dys[i] = d_dy.get() + i * M * N;
      dws[i] = i == 1 ? nullptr : d_dw.get() + (reversed ? count - 1 - i : i) * N * K;
    }
    gpu_->matmul_forward_batch(ys, d_x.get(), ws, count, M, N, K);
    gpu_->matmul_weight_grad_batch(dws, dys, d_x.get(), count, M, N, K, GradWrite::kAdd);
    std::vector<float> want_y = y, want_dw = dw;
    if (reversed) {  // slot count-1-i holds product i
      for (int64_t i = 0; i < count; ++i) {
        std::copy_n(y.begin() + i * M * N, M * N, want_y.begin() + (count - 1 - i) * M * N);
        std::copy_n(dw.begin() + i * N * K, N * K, want_dw.begin() + (count - 1 - i) * N * K);
      }
    }
    EXPECT_TRUE(close(d_y.download(), want_y, rtol, "y"));
    EXPECT_TRUE(close(d_dw.download(), want_dw, rtol, "dw (+=, weight 1 frozen)"));
    DeviceBuffer<float> d_y2(count * M * N);
    TensorView ys2[count];
    for (int64_t i = 0; i < count; ++i)
      ys2[i] = d_y2.get() + (reversed ? count - 1 - i : i) * M * N;
    gpu_->matmul_forward_batch(ys2, d_x.get(), ws, count, M, N, K);
    EXPECT_TRUE(bitwise_equal(d_y2.download(), d_y.download(), "y run 2"));
  }
}

INSTANTIATE_TEST_SUITE_P(Compute, CudaBatchedGemm,
                         ::testing::Values(GemmCompute::kFp32, GemmCompute::kBf16TensorCores),
                         [](const auto& info) {
                           return info.param == GemmCompute::kFp32 ? "Fp32" : "Bf16TensorCores";
                         });

// The batch above may pass by falling back; this one must run as one strided batch: cuBLASLt
// takes the shared input at batch stride 0, bf16 operands (what --activations bf16 runs), and
// each product is right.
TEST(CudaBatchedGemmPlan, CublasLtRunsABatchWithAStrideZeroInput) {
  const int64_t M = 128, N = 256, K = 192, count = 3;
  cudaStream_t stream = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    DeviceBuffer<std::byte> workspace(size_t{8} << 20);
    cuda::LtGemm gemm(stream, workspace.get(), workspace.size(), GemmCompute::kBf16TensorCores);
    Stored16Tensor<DType::kBf16> x(random_floats(M * K, 81)), w(random_floats(count * N * K, 82)),
        y(static_cast<size_t>(count * M * N));
    cuda::RowMajorGemm g;
    g.transpose_b = true;
    g.rows = M, g.cols = N, g.inner = K, g.batch = count;
    g.a = x.device.get(), g.lda = K, g.stride_a = 0;
    g.b = w.device.get(), g.ldb = K, g.stride_b = N * K;
    g.c = y.device.get(), g.ldc = N, g.stride_c = M * N;
    g.a_type = g.b_type = g.c_type = DType::kBf16;
    EXPECT_TRUE(gemm.try_run(g));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
    // And its values: product i is x·w_iᵀ (the CPU's, from the same bf16 inputs).
    cpu::CpuBackend cpu;
    const std::vector<float> xs = x.cpu(), ws = w.cpu();
    std::vector<float> want(static_cast<size_t>(count * M * N));
    for (int64_t i = 0; i < count; ++i)
      cpu.matmul_forward(want.data() + i * M * N, xs.data(), ws.data() + i * N * K, M, N, K);
    EXPECT_TRUE(close(y.gpu(), want, tolerance(GemmCompute::kBf16TensorCores), "batched y"));
  }
  ZT_CUDA_CHECK(cudaStreamDestroy(stream));
}

class CudaFusedKernels : public ::testing::Test {
 protected:
  cpu::CpuBackend cpu_;
  std::unique_ptr<cuda::CudaBackend> gpu_ = make_cuda_backend(0, test_options(GemmCompute::kFp32));
};

// Small integers (x, w) and quarters (residual): every fp32 product sum is exact in any order and
// so is product + residual, so the GPU must give the CPU's bits, and rounding that sum once can
// differ from rounding the product first (a product of 257 plus 0.75 is bf16 258 once, 256 twice).
std::vector<float> small_integers(size_t n, uint64_t seed, int limit, float unit) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(-limit, limit);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(dist(rng)) * unit;
  return out;
}

// y = residual + x·wᵀ as one GEMM with β = 1, bitwise the CPU (K = 1024 may take split-K, whose
// partials the 16-bit reduction mask keeps in fp32), with the residual one element off y's
// alignment, and an empty product (K = 0: y = residual).
template <DType kType>
void check_matmul_forward_add(cpu::CpuBackend& cpu, cuda::CudaBackend& gpu) {
  const int64_t M = 37, N = 72;
  for (const int64_t K : {int64_t{96}, int64_t{1024}, int64_t{0}}) {
    SCOPED_TRACE("K=" + std::to_string(K));
    Stored16Tensor<kType> x(small_integers(M * K, 101, 3, 1.0f)),
        w(small_integers(N * K, 102, 3, 1.0f)), residual(small_integers(M * N + 1, 103, 40, 0.25f)),
        y(static_cast<size_t>(M * N)), twice(static_cast<size_t>(M * N));
    const ConstTensorView r_cpu = residual.cpu_view().at(1), r_gpu = residual.gpu_view().at(1);
    cpu.matmul_forward_add(y.cpu_view(), x.cpu_view(), w.cpu_view(), r_cpu, M, N, K);
    gpu.matmul_forward_add(y.gpu_view(), x.gpu_view(), w.gpu_view(), r_gpu, M, N, K);
    EXPECT_TRUE(bitwise_equal(y.device.download(), y.host, "y = residual + x·wᵀ"));
    // bf16 with K = 1024: some |products| pass 256, where bf16 steps by 2, so rounding them first
    // changes some sums: bitwise agreement with the CPU then shows the GPU rounds once.
    if (kType == DType::kBf16 && K == 1024) {
      cpu.matmul_forward(twice.cpu_view(), x.cpu_view(), w.cpu_view(), M, N, K);
      cpu.add_inplace(twice.cpu_view(), r_cpu, M * N);
      EXPECT_NE(twice.host, y.host);
    }
  }
}

TEST_F(CudaFusedKernels, MatmulForwardAddIsOneGemmOntoTheResidual) {
  {
    SCOPED_TRACE("bf16");
    check_matmul_forward_add<DType::kBf16>(cpu_, *gpu_);
  }
  {
    SCOPED_TRACE("fp16");
    check_matmul_forward_add<DType::kFloat16>(cpu_, *gpu_);
  }
  const int64_t M = 19, N = 40, K = 64;
  const auto x = small_integers(M * K, 104, 3, 1.0f), w = small_integers(N * K, 105, 3, 1.0f),
             residual = small_integers(M * N, 106, 40, 0.25f);
  std::vector<float> y(M * N);
  cpu_.matmul_forward_add(y.data(), x.data(), w.data(), residual.data(), M, N, K);
  DeviceBuffer<float> d_x(x), d_w(w), d_residual(residual), d_y(M * N);
  gpu_->matmul_forward_add(d_y.get(), d_x.get(), d_w.get(), d_residual.get(), M, N, K);
  EXPECT_TRUE(bitwise_equal(d_y.download(), y, "fp32 y"));
}

// The same values at an aligned offset (chunks of 16 bytes) and one element further (every
// pointer misaligned: one element at a time) give the same bits; n = 8k + 5 has a tail.
struct ElementwiseOutputs {
  std::vector<uint16_t> h, dgate, dup, sum;  // bf16 bits
  std::vector<float> widened;                // from_bf16(h)
};

ElementwiseOutputs run_elementwise(cuda::CudaBackend& gpu, const std::vector<float>& gate,
                                   const std::vector<float>& up, const std::vector<float>& dh,
                                   int64_t offset) {
  using Bf16 = Stored16Tensor<DType::kBf16>;
  const int64_t n = static_cast<int64_t>(gate.size());
  auto padded = [&](const std::vector<float>& v) {
    std::vector<float> out(static_cast<size_t>(offset), 0.0f);
    out.insert(out.end(), v.begin(), v.end());
    return out;
  };
  Bf16 g(padded(gate)), u(padded(up)), d(padded(dh)), sum(padded(gate)), h(n + offset),
      dg(n + offset), du(n + offset);
  gpu.glu_forward(h.gpu_view().at(offset), g.gpu_view().at(offset), u.gpu_view().at(offset), n);
  gpu.glu_backward(dg.gpu_view().at(offset), du.gpu_view().at(offset), d.gpu_view().at(offset),
                   g.gpu_view().at(offset), u.gpu_view().at(offset), n);
  gpu.add_inplace(sum.gpu_view().at(offset), u.gpu_view().at(offset), n);
  DeviceBuffer<float> widened(n + offset);
  gpu.from_bf16(widened.get() + offset, h.device.get() + offset, n);
  auto from_offset = [&](auto v) { return decltype(v)(v.begin() + offset, v.end()); };
  return {from_offset(h.device.download()), from_offset(dg.device.download()),
          from_offset(du.device.download()), from_offset(sum.device.download()),
          from_offset(widened.download())};
}

TEST_F(CudaFusedKernels, ChunkedElementwiseEqualsOneByOne) {
  const int64_t n = 8 * 97 + 5;
  const auto gate = random_floats(n, 71, 3.0f), up = random_floats(n, 72),
             dh = random_floats(n, 73);
  const ElementwiseOutputs chunked = run_elementwise(*gpu_, gate, up, dh, 0);
  const ElementwiseOutputs one_by_one = run_elementwise(*gpu_, gate, up, dh, 1);
  EXPECT_TRUE(bitwise_equal(chunked.h, one_by_one.h, "swiglu h"));
  EXPECT_TRUE(bitwise_equal(chunked.dgate, one_by_one.dgate, "swiglu dgate"));
  EXPECT_TRUE(bitwise_equal(chunked.dup, one_by_one.dup, "swiglu dup"));
  EXPECT_TRUE(bitwise_equal(chunked.sum, one_by_one.sum, "add"));
  EXPECT_TRUE(bitwise_equal(chunked.widened, one_by_one.widened, "from_bf16"));
}

// fp32 inputs (4 per 16 bytes, two accesses per chunk) and fp16 outputs: the conversions and the
// fp32 scale, chunked against one element at a time (the same values one float further on).
TEST_F(CudaFusedKernels, ChunkedConversionsEqualOneByOne) {
  const int64_t n = 8 * 61 + 3;
  std::vector<float> values = random_floats(n, 91, 2.0e4f);  // some beyond fp16's 65504
  values[5] = 1e-8f;                                         // an fp16 subnormal
  auto run = [&](int64_t offset) {
    std::vector<float> padded(static_cast<size_t>(offset), 0.0f);
    padded.insert(padded.end(), values.begin(), values.end());
    DeviceBuffer<float> in(padded), scaled(padded), back(n + offset);
    DeviceBuffer<uint16_t> b16(n + offset), f16(n + offset);
    gpu_->to_bf16(b16.get() + offset, in.get() + offset, n);
    gpu_->to_fp16(f16.get() + offset, in.get() + offset, n);
    gpu_->from_fp16(back.get() + offset, f16.get() + offset, n);
    gpu_->scale_inplace(scaled.get() + offset, 0.37f, n);
    auto from_offset = [&](auto v) { return decltype(v)(v.begin() + offset, v.end()); };
    return std::make_tuple(from_offset(b16.download()), from_offset(f16.download()),
                           from_offset(back.download()), from_offset(scaled.download()));
  };
  const auto [b16_c, f16_c, back_c, scaled_c] = run(0);
  const auto [b16_1, f16_1, back_1, scaled_1] = run(1);
  EXPECT_TRUE(bitwise_equal(b16_c, b16_1, "to_bf16"));
  EXPECT_TRUE(bitwise_equal(f16_c, f16_1, "to_fp16"));
  EXPECT_TRUE(bitwise_equal(back_c, back_1, "from_fp16"));
  EXPECT_TRUE(bitwise_equal(scaled_c, scaled_1, "scale_inplace"));
}

}  // namespace
}  // namespace zt::gpu_test

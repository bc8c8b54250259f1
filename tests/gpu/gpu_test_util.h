// Helpers of the GPU tests: device buffers with upload/download/poison, random inputs, and the
// comparisons (relative tolerance against the CPU backend, bitwise equality).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "util/cuda/cuda_check.h"

namespace zt::gpu_test {

// Tolerances (relative, see close()): bf16 tensor-core GEMM paths and exact fp32 paths.
constexpr double kBf16Tolerance = 1e-2;
// Gradients that pass through two bf16-operand GEMMs in a row (the attention backward's
// dq = (P∘(dout·Vᵀ − D))·K·scale, dk, dv). Derivation: bf16 keeps 8 significant bits, so
// rounding to nearest errs by at most 2⁻⁸ relative; uniform over the ulp and averaged over a
// binade (a value m·2ᵉ, m in [1, 2), errs relative to m), σ ≈ 2⁻⁸/√3 · E[1/m] ≈ 1.6e-3. A product
// of two rounded operands errs by √2 of that, ≈ 2.3e-3, and a sum of such products with random
// signs errs by that fraction of its rms. The chain adds the roundings of dS and K:
// σ ≈ √(2.3² + 1.6² + 1.6²)·1e-3 ≈ 3.2e-3 of the rms. The largest of ~6.5e4 such errors lands
// near 4.3σ ≈ 1.4e-2, past the single-GEMM bound above: the H100 run of 2026-11-27 saw 1.21e-2
// and 1.32e-2 at 2 and 4 of 51200 and 65536 elements (bench/results/2026-11-27-h100). 2.5e-2 is
// ≈ 7.8σ (a tail of ~1e-14 per element): no rounding tail reaches it, and a real error (a wrong
// scale, index or missing term) is of order 1 and still fails; the fp32 variant runs the same
// indexing at 1e-5.
constexpr double kBf16ChainTolerance = 2.5e-2;
constexpr double kFp32Tolerance = 1e-5;

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    ZT_CUDA_CHECK(cudaMalloc(&data_, std::max<size_t>(count, 1) * sizeof(T)));
    poison();
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() { return data_; }
  const T* get() const { return data_; }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    ZT_CUDA_CHECK(cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
    // Complete before work on non-blocking streams (NCCL's, the backend's) may read it.
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    ZT_CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // All bytes 0xFF: a NaN in every float, so an output element the kernel forgot stays NaN.
  void poison() {
    ZT_CUDA_CHECK(cudaMemset(data_, 0xFF, std::max<size_t>(count_, 1) * sizeof(T)));
    ZT_CUDA_CHECK(cudaDeviceSynchronize());  // done before other streams write the buffer
  }

 private:
  T* data_ = nullptr;
  size_t count_;
};

// A tensor stored in a 16-bit type (bf16 or fp16) on both backends: the host copy for the CPU,
// the device copy for the GPU, both from the same bits.
template <DType kType>
struct Stored16Tensor {
  std::vector<uint16_t> host;
  DeviceBuffer<uint16_t> device;

  explicit Stored16Tensor(const std::vector<float>& values) : host(bits_of(values)), device(host) {}
  explicit Stored16Tensor(size_t n) : host(n, 0), device(n) {}

  static std::vector<uint16_t> bits_of(const std::vector<float>& values) {
    std::vector<uint16_t> bits(values.size());
    round_16bit(kType, values.data(), bits.data(), values.size());
    return bits;
  }
  TensorView cpu_view() { return {host.data(), kType}; }
  TensorView gpu_view() { return {device.get(), kType}; }
  std::vector<float> cpu() const { return widen(host); }
  std::vector<float> gpu() const { return widen(device.download()); }
  static std::vector<float> widen(const std::vector<uint16_t>& bits) {
    std::vector<float> out(bits.size());
    widen_16bit(kType, bits.data(), out.data(), bits.size());
    return out;
  }
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

inline std::vector<int32_t> random_ids(size_t n, int32_t limit, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, limit - 1);
  std::vector<int32_t> out(n);
  for (int32_t& x : out) x = dist(rng);
  return out;
}

// Ids drawn log-uniformly from [1, limit], less one: P(id = k) ≈ ln((k + 2)/(k + 1))/ln(limit), a
// Zipf-like skew as real text has (id 0 about 7% of the positions at limit 32000: runs of
// hundreds in a few thousand positions).
inline std::vector<int32_t> skewed_ids(size_t n, int32_t limit, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(0.0, std::log(double(limit)));
  std::vector<int32_t> out(n);
  for (int32_t& x : out) {
    x = std::min(limit - 1, static_cast<int32_t>(std::floor(std::exp(exponent(rng)))) - 1);
  }
  return out;
}

// |gpu − cpu| ≤ rtol·(|cpu| + rms(cpu)) for every element, and no NaN where cpu is finite (a
// poisoned element never written fails). The rms term keeps elements near zero (cancellation)
// from demanding more than the data's scale allows; it is taken over the finite elements, so an
// infinity or NaN in cpu (an edge case under test) does not turn every bound into NaN. An
// element equal to cpu (an infinity included) or NaN where cpu is NaN passes.
inline ::testing::AssertionResult close(const std::vector<float>& gpu,
                                        const std::vector<float>& cpu, double rtol,
                                        const std::string& what) {
  if (gpu.size() != cpu.size()) return ::testing::AssertionFailure() << what << ": size differs";
  double sum_sq = 0.0;
  size_t finite = 0;
  for (float c : cpu) {
    const double square = static_cast<double>(c) * c;
    if (!std::isfinite(square)) continue;
    sum_sq += square;
    ++finite;
  }
  const double rms = finite == 0 ? 0.0 : std::sqrt(sum_sq / static_cast<double>(finite));
  size_t bad = 0, first = 0;
  double worst = 0.0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double c = cpu[i], g = gpu[i];
    const double err = std::fabs(g - c);
    // An infinite cpu value allows only itself (a finite bound around it would take anything).
    const double allowed = std::isinf(c) ? 0.0 : rtol * (std::fabs(c) + rms);
    if (g != c && !(err <= allowed) && !(std::isnan(c) && std::isnan(g))) {
      if (bad++ == 0) first = i;
      worst = std::max(worst, std::isnan(err) ? INFINITY : err / (std::fabs(c) + rms));
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << cpu.size() << " elements beyond rtol " << rtol
         << " (first at " << first << ": gpu " << gpu[first] << " cpu " << cpu[first]
         << "; worst scaled error " << worst << ")";
}

template <typename T>
::testing::AssertionResult bitwise_equal(const std::vector<T>& a, const std::vector<T>& b,
                                         const std::string& what) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": size differs";
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure() << what << ": first difference at " << i << " of "
                                           << a.size() << " (" << a[i] << " vs " << b[i] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Document masks (backend.h) of B rows of T tokens: row b's documents are 5 + 3·b tokens long, so
// rows differ and documents cross every block and pass boundary.
inline std::vector<int32_t> periodic_doc_starts(int64_t B, int64_t T) {
  std::vector<int32_t> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) out.push_back(static_cast<int32_t>(t - t % (5 + 3 * b)));
  return out;
}

// Small scratch sizes so the tests need little memory (and attention runs several passes).
inline cuda::CudaBackendOptions test_options(cuda::GemmCompute compute) {
  cuda::CudaBackendOptions options;
  options.gemm_compute = compute;
  options.gemm_workspace_bytes = size_t{8} << 20;
  options.attention_scratch_bytes = size_t{16} << 20;
  options.reduction_scratch_bytes = size_t{1} << 20;
  return options;
}

inline double tolerance(cuda::GemmCompute compute) {
  return compute == cuda::GemmCompute::kFp32 ? kFp32Tolerance : kBf16Tolerance;
}
// The bound for results of two chained GEMMs (kBf16ChainTolerance derives it).
inline double chain_tolerance(cuda::GemmCompute compute) {
  return compute == cuda::GemmCompute::kFp32 ? kFp32Tolerance : kBf16ChainTolerance;
}

}  // namespace zt::gpu_test

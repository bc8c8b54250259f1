// The two ceilings a GPU figure is read against (device/METHOD.md: measure them once on the
// machine), next to the model's own GEMM shapes, all through zerotrain's CUDA backend:
//   copy     device-to-device copy of a large buffer: bytes read + bytes written per second;
//   gemm     CudaBackend::matmul_forward (cuBLASLt) y[M,N] = x[M,K]·w[N,K]ᵀ, 2·M·N·K FLOP per
//            call: fp32 storage on bf16 tensor cores (--activations fp32), bf16 storage (bf16
//            operands and result, fp32 accumulation: --activations bf16, the CUDA default) and
//            exact fp32. The first two differ only in what cuBLASLt reads and writes.
// The MFU that `train` reports divides by the dense bf16 datasheet peak (docs/ARCHITECTURE.md §5:
// 989 TFLOP/s for H100/H200 SXM); the measured square-GEMM rate says how much of it this GEMM path
// reaches at all. Random inputs (never zeros), warm-up first, event-timed, median of the
// repeats. Usage: bench_gpu_ceilings [repeats=20]. Exit 77 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_devices.h"
#include "util/bf16.h"
#include "util/cuda/cuda_check.h"

namespace {

struct Shape {
  std::string name;
  int64_t M, N, K;
};

// Median milliseconds of `repeats` runs of `work` on `stream`, after two warm-up runs.
template <typename Work>
double median_ms(cudaStream_t stream, int repeats, Work work) {
  cudaEvent_t start = nullptr, stop = nullptr;
  ZT_CUDA_CHECK(cudaEventCreate(&start));
  ZT_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) work();
  std::vector<float> ms(static_cast<size_t>(repeats));
  for (float& t : ms) {
    ZT_CUDA_CHECK(cudaEventRecord(start, stream));
    work();
    ZT_CUDA_CHECK(cudaEventRecord(stop, stream));
    ZT_CUDA_CHECK(cudaEventSynchronize(stop));
    ZT_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
  }
  ZT_CUDA_CHECK(cudaEventDestroy(start));
  ZT_CUDA_CHECK(cudaEventDestroy(stop));
  std::nth_element(ms.begin(), ms.begin() + repeats / 2, ms.end());
  return ms[static_cast<size_t>(repeats / 2)];
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> host(n);
  for (float& x : host) x = dist(rng);
  return host;
}

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&d, host.size() * sizeof(T)));
  ZT_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

float* random_device_floats(size_t n, uint64_t seed) {
  return device_copy(random_floats(n, seed));
}

zt::bf16_t* random_device_bf16(size_t n, uint64_t seed) {
  const std::vector<float> values = random_floats(n, seed);
  std::vector<zt::bf16_t> rounded(n);
  zt::floats_to_bf16(values.data(), rounded.data(), n);
  return device_copy(rounded);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(3, std::atoi(argv[1])) : 20;
  if (zt::cuda_device_count() == 0) {
    std::printf("bench_gpu_ceilings: no GPU visible: skipped\n");
    return 77;
  }
  cudaDeviceProp prop{};
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %.1f GiB\n", prop.name,
              static_cast<double>(prop.totalGlobalMem) / (1ull << 30));

  // ---- copy ceiling ----
  {
    const size_t bytes = size_t{1} << 30;
    float* src = random_device_floats(bytes / sizeof(float), 1);
    float* dst = nullptr;
    ZT_CUDA_CHECK(cudaMalloc(&dst, bytes));
    cudaStream_t stream = nullptr;
    ZT_CUDA_CHECK(cudaStreamCreate(&stream));
    const double ms = median_ms(stream, repeats, [&] {
      ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    });
    std::printf("copy  1 GiB device-to-device: %.3f ms, %.0f GB/s (read + write)\n", ms,
                2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9);
    ZT_CUDA_CHECK(cudaStreamDestroy(stream));
    ZT_CUDA_CHECK(cudaFree(src));
    ZT_CUDA_CHECK(cudaFree(dst));
  }

  // ---- GEMM ceilings: a large square product, then the presets' linear layers at 8192 tokens
  // (micro-batch 4 × seq 2048): q/o projections (D×D) and the MLP (F×D, D×F). ----
  const std::vector<Shape> shapes = {
      {"square 8192", 8192, 8192, 8192},     {"125m  x·Wqᵀ", 8192, 768, 768},
      {"125m  x·Wgateᵀ", 8192, 2048, 768},   {"1b    x·Wqᵀ", 8192, 2048, 2048},
      {"1b    x·Wgateᵀ", 8192, 5504, 2048},  {"1b    h·Wdownᵀ", 8192, 2048, 5504},
      {"6b    x·Wqᵀ", 8192, 4096, 4096},     {"6b    x·Wgateᵀ", 8192, 11008, 4096},
      {"6b    h·Wdownᵀ", 8192, 4096, 11008},
  };
  std::printf("%-18s %6s %6s %6s | %12s %10s | %12s %10s | %12s %10s\n", "gemm", "M", "N", "K",
              "fp32-in ms", "TFLOP/s", "bf16-in ms", "TFLOP/s", "fp32 ms", "TFLOP/s");
  // One backend per compute mode, made once (each holds a stream, handles and scratch arenas).
  std::unique_ptr<zt::cuda::CudaBackend> backends[2];
  const zt::cuda::GemmCompute modes[2] = {zt::cuda::GemmCompute::kBf16TensorCores,
                                          zt::cuda::GemmCompute::kFp32};
  for (int i = 0; i < 2; ++i) {
    zt::cuda::CudaBackendOptions options;
    options.gemm_compute = modes[i];
    backends[i] = zt::make_cuda_backend(0, options);
  }
  for (const Shape& s : shapes) {
    float* x = random_device_floats(static_cast<size_t>(s.M * s.K), 2);
    float* w = random_device_floats(static_cast<size_t>(s.N * s.K), 3);
    zt::bf16_t* x16 = random_device_bf16(static_cast<size_t>(s.M * s.K), 2);
    zt::bf16_t* w16 = random_device_bf16(static_cast<size_t>(s.N * s.K), 3);
    float* y = nullptr;
    zt::bf16_t* y16 = nullptr;
    ZT_CUDA_CHECK(cudaMalloc(&y, static_cast<size_t>(s.M * s.N) * sizeof(float)));
    ZT_CUDA_CHECK(cudaMalloc(&y16, static_cast<size_t>(s.M * s.N) * sizeof(zt::bf16_t)));
    // Columns: fp32 storage on bf16 tensor cores, bf16 storage (the same backend), exact fp32.
    double ms[3] = {0, 0, 0};
    for (int column = 0; column < 3; ++column) {
      zt::cuda::CudaBackend& backend = *backends[column == 2 ? 1 : 0];
      const auto stream = static_cast<cudaStream_t>(backend.stream_handle());
      ms[column] = median_ms(stream, repeats, [&] {
        if (column == 1)
          backend.matmul_forward(y16, x16, w16, s.M, s.N, s.K);
        else
          backend.matmul_forward(y, x, w, s.M, s.N, s.K);
      });
    }
    const double flop =
        2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);
    std::printf("%-18s %6lld %6lld %6lld", s.name.c_str(), static_cast<long long>(s.M),
                static_cast<long long>(s.N), static_cast<long long>(s.K));
    for (const double t : ms) std::printf(" | %12.3f %10.1f", t, flop / (t * 1e-3) / 1e12);
    std::printf("\n");
    for (void* p : {static_cast<void*>(x), static_cast<void*>(w), static_cast<void*>(y),
                    static_cast<void*>(x16), static_cast<void*>(w16), static_cast<void*>(y16)})
      ZT_CUDA_CHECK(cudaFree(p));
  }
  std::printf(
      "reference: dense bf16 datasheet peak used for MFU (docs/ARCHITECTURE.md §5) = 989 TFLOP/s "
      "(H100/H200 SXM)\n");
  return 0;
}

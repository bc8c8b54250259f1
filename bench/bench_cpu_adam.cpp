// CPU AdamW throughput: params/s of every available SIMD path of the shared kernel
// (backend/cpu/cpu_adam.h) against a plain scalar loop without fma, on the same data, OpenMP
// threads as OMP_NUM_THREADS. Usage: bench_cpu_adam [elements=1e8] [repeats=3]
// Memory: 18 bytes per element (fp32 master, m, v, grad + bf16 output).
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cpu/cpu_adam.h"
#include "util/bf16.h"
#include "util/memory.h"

namespace {

using Clock = std::chrono::steady_clock;

// The textbook loop (the compiler vectorises it as it likes; no fma at -O2 for x86-64).
void plain_scalar_adam(float* master, float* m, float* v, const float* grad, zt::bf16_t* out,
                       int64_t n, const zt::AdamWHyper& h) {
  const float bc1 = static_cast<float>(1.0 - std::pow(double(h.beta1), double(h.step)));
  const float bc2 = static_cast<float>(1.0 - std::pow(double(h.beta2), double(h.step)));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * h.grad_scale;
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    master[i] -=
        h.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + h.eps) + h.lr * h.weight_decay * master[i];
    out[i] = zt::float_to_bf16(master[i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? static_cast<int64_t>(std::atof(argv[1])) : 100'000'000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  auto alloc = [&](size_t bytes) { return static_cast<char*>(zt::aligned_zeroed_alloc(bytes)); };
  float* master = reinterpret_cast<float*>(alloc(static_cast<size_t>(n) * 4));
  float* m = reinterpret_cast<float*>(alloc(static_cast<size_t>(n) * 4));
  float* v = reinterpret_cast<float*>(alloc(static_cast<size_t>(n) * 4));
  float* grad = reinterpret_cast<float*>(alloc(static_cast<size_t>(n) * 4));
  auto* out = reinterpret_cast<zt::bf16_t*>(alloc(static_cast<size_t>(n) * 2));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    master[i] = 0.01f * static_cast<float>(i % 1000);
    grad[i] = 1e-3f * static_cast<float>(i % 777) - 0.3f;
  }
  zt::AdamWHyper h;
  h.lr = 1e-4f;
  h.weight_decay = 0.1f;
  std::printf("CPU Adam, %lld elements, %d OpenMP threads, best path %s, %d repeats (best)\n",
              static_cast<long long>(n), omp_get_max_threads(),
              zt::cpu::adam_simd_name(zt::cpu::best_adam_simd()), repeats);
  std::printf("%-22s %12s %14s %12s\n", "path", "seconds", "params/s", "GB/s");
  auto report = [&](const char* name, auto&& fn) {
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      h.step = r + 1;
      const auto t0 = Clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    // Traffic: read master, m, v, grad; write master, m, v, bf16 = 30 bytes per element.
    std::printf("%-22s %12.4f %14.3e %12.2f\n", name, best, double(n) / best,
                30.0 * double(n) / best / 1e9);
  };
  report("plain scalar loop", [&] { plain_scalar_adam(master, m, v, grad, out, n, h); });
  for (auto p :
       {zt::cpu::AdamSimd::kScalar, zt::cpu::AdamSimd::kAvx2, zt::cpu::AdamSimd::kAvx512}) {
    if (!zt::cpu::adam_simd_available(p)) {
      std::printf("%-22s %12s\n", zt::cpu::adam_simd_name(p), "unavailable");
      continue;
    }
    report(zt::cpu::adam_simd_name(p),
           [&] { zt::cpu::adam_update(p, master, m, v, grad, out, nullptr, n, h); });
  }
  for (void* p : {static_cast<void*>(master), static_cast<void*>(m), static_cast<void*>(v),
                  static_cast<void*>(grad), static_cast<void*>(out)})
    zt::aligned_free(p);
  return 0;
}

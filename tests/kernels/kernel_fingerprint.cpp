// zt_kernel_fingerprint: which CPU kernels this process computes with, as one line
//
//   blas <16 hex digits> adam <scalar|avx2|avx512>
//
// blas: a digest of the bits the CPU backend's sgemm (backend/cpu/cpu_backend.h: OpenBLAS over
// fixed tiles) gives on a set of products that reach every case its kernels treat apart: each
// transpose pair, beta 0, 1 and another, a contracted dimension below, across and beyond
// OpenBLAS's blocking (up to 2 048), and edges that are not multiples of the micro-kernel or of
// the backend's tiles. Two environments (OPENBLAS_CORETYPE) with the same digest computed the
// same bits on every one of them: they run the same kernels. adam: the CPU Adam path
// (backend/cpu/cpu_adam.h) that ZT_CPU_ADAM_SIMD and the CPU leave.
//
// `./run.sh test` runs the numeric tests again under other kernels (its run_variants); a variant
// whose digest ran already adds nothing and is skipped, saying so (the Adam paths are checked
// against each other in the whole-suite pass).
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "backend/cpu/cpu_adam.h"
#include "backend/cpu/cpu_backend.h"

namespace {

struct Product {
  bool transpose_a, transpose_b;
  int64_t rows, cols, inner;
  float beta;
};

// FNV-1a over bytes.
struct Digest {
  uint64_t value = 0xcbf29ce484222325ULL;
  void add(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) value = (value ^ p[i]) * 0x100000001b3ULL;
  }
};

// Values in [-1, 1) from a linear congruential generator: reproducible on every machine.
void fill(std::vector<float>& values, uint32_t& state) {
  for (float& x : values) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
  }
}

uint64_t blas_digest() {
  const Product products[] = {
      {false, true, 1, 1, 1, 0.0f},        {false, true, 7, 5, 3, 1.0f},
      {false, false, 64, 64, 64, 0.0f},    {true, false, 33, 129, 700, 0.37f},
      {true, true, 130, 300, 333, 1.0f},   {false, true, 256, 576, 1536, 0.0f},
      {true, false, 576, 64, 1536, 1.0f},  {false, false, 17, 1000, 2048, 0.0f},
      {false, true, 129, 257, 320, -0.5f}, {true, true, 5, 3, 1025, 0.0f},
  };
  Digest digest;
  uint32_t state = 12345u;
  for (const Product& p : products) {
    std::vector<float> a(p.rows * p.inner), b(p.inner * p.cols), c(p.rows * p.cols);
    fill(a, state);
    fill(b, state);
    fill(c, state);
    const int64_t lda = p.transpose_a ? p.rows : p.inner;
    const int64_t ldb = p.transpose_b ? p.inner : p.cols;
    zt::cpu::sgemm(p.transpose_a, p.transpose_b, p.rows, p.cols, p.inner, 1.0f, a.data(), lda,
                   b.data(), ldb, p.beta, c.data(), p.cols);
    digest.add(c.data(), c.size() * sizeof(float));
  }
  return digest.value;
}

}  // namespace

int main() {
  try {
    const uint64_t blas = blas_digest();
    std::printf("blas %016" PRIx64 " adam %s\n", blas,
                zt::cpu::adam_simd_name(zt::cpu::best_adam_simd()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zt_kernel_fingerprint: %s\n", e.what());
    return 1;
  }
}

// CPU backend: AdamW and the deterministic sum of squares (gradient norm).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_adam.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "util/error.h"

namespace zt::cpu {
namespace {

// sum_squares sums fixed blocks of this many elements; the block boundaries, not the threads,
// decide the summation order.
constexpr int64_t kSumSquaresBlock = 8192;

}  // namespace

// AdamW: the shared kernel (cpu_adam.h) on the widest SIMD path this CPU has; every path gives
// the same bits.
void CpuBackend::adamw(float* master, float* m, float* v, const float* grad, bf16_t* param_bf16,
                       float* param_f32, int64_t n, const AdamWHyper& h) {
  adam_update(best_adam_simd(), master, m, v, grad, param_bf16, param_f32, n, h);
}

// Σ x²: the sums of blocks of kSumSquaresBlock elements (block_sum_squares), added in block
// order on the calling thread.
double CpuBackend::sum_squares(const float* x, int64_t n) {
  std::vector<double> block_sums(
      static_cast<size_t>((n + kSumSquaresBlock - 1) / kSumSquaresBlock));
  block_sum_squares(block_sums.data(), x, n, kSumSquaresBlock);
  double total = 0.0;
  for (double s : block_sums) total += s;
  return total;
}

// Each block in double with dot_double's fixed lane order, the blocks spread over threads.
void CpuBackend::block_sum_squares(double* out, const float* x, int64_t n, int64_t block) {
  const int64_t blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block;
    out[b] = dot_double(x + begin, x + begin, std::min(block, n - begin));
  }
}

}  // namespace zt::cpu

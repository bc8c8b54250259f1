// CPU backend: AdamW and the deterministic sum of squares (gradient norm).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "util/error.h"

namespace zt::cpu {
namespace {

// sum_squares sums fixed blocks of this many elements; the block boundaries, not the threads,
// decide the summation order.
constexpr int64_t kSumSquaresBlock = 8192;

}  // namespace

// AdamW, exactly the header's formula evaluated in fp32 per element:
//   g = grad·grad_scale;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//   master −= lr·(m/bc1) / (sqrt(v/bc2) + eps) + lr·wd·master   (wd uses the pre-update master)
// with bc1 = 1 − β1^t and bc2 = 1 − β2^t computed in double and rounded to fp32 once per call.
void CpuBackend::adamw(float* master, float* m, float* v, const float* grad, bf16_t* param_bf16,
                       float* param_f32, int64_t n, const AdamWHyper& h) {
  ZT_CHECK(h.step >= 1, "adamw: step " + std::to_string(h.step) + " is not 1-based");
  const double t = static_cast<double>(h.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), t));
  const float one_minus_beta1 = 1.0f - h.beta1;
  const float one_minus_beta2 = 1.0f - h.beta2;
  const float decay = h.lr * h.weight_decay;
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * h.grad_scale;
    const float mi = h.beta1 * m[i] + one_minus_beta1 * g;
    const float vi = h.beta2 * v[i] + one_minus_beta2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float w = master[i];
    const float updated = w - (h.lr * (mi / bc1) / (std::sqrt(vi / bc2) + h.eps) + decay * w);
    master[i] = updated;
    if (param_bf16) param_bf16[i] = float_to_bf16(updated);
    if (param_f32) param_f32[i] = updated;
  }
}

// Σ x²: each block of kSumSquaresBlock elements is summed in double in index order, then the
// block sums are added in block order on the calling thread.
double CpuBackend::sum_squares(const float* x, int64_t n) {
  const int64_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  std::vector<double> block_sums(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t begin = blk * kSumSquaresBlock;
    const int64_t count = std::min(kSumSquaresBlock, n - begin);
    block_sums[static_cast<size_t>(blk)] = dot_double(x + begin, x + begin, count);
  }
  double total = 0.0;
  for (double s : block_sums) total += s;
  return total;
}

}  // namespace zt::cpu

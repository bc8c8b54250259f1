// Small helpers shared by the CPU backend's kernels: a vectorisable exp, row dot/axpy loops and
// the thresholds below which a loop is not worth an OpenMP fork.
#pragma once
#include <bit>
#include <cstdint>

#include "util/lane_sum.h"

namespace zt::cpu {

// Loops over fewer elements than this run on the calling thread.
constexpr int64_t kParallelMinElements = 1 << 15;

// take ? a : b through bit masks: GCC does not if-convert a float select, and a loop with one
// does not vectorise.
inline float select_float(bool take, float a, float b) {
  const int32_t mask = -static_cast<int32_t>(take);
  return std::bit_cast<float>((std::bit_cast<int32_t>(a) & mask) |
                              (std::bit_cast<int32_t>(b) & ~mask));
}

// exp(x) in fp32 within a few ulp, written without branches or library calls so that loops
// calling it vectorise. x = n·ln2 + r with |r| ≤ ln2/2 (Cody–Waite split of ln2, n·kLn2Hi is
// exact), exp(r) by its degree-7 Taylor polynomial (truncation < 6e-9 relative), 2^n assembled in
// the exponent bits. Inputs below −87.3 (where exp leaves the normal range) give 0; inputs above
// 88.3 saturate at exp(88.3) ≈ 2.1e38 (+inf included); NaN stays NaN. Relies on IEEE semantics
// (the rounding trick breaks under -ffast-math; FastExpAccuracyAndRange would catch it).
inline float fast_expf(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;              // 355/512: 9 significant bits
  constexpr float kLn2Lo = -2.12194440054690583e-4f;  // ln2 − kLn2Hi
  constexpr float kRoundMagic = 12582912.0f;  // 1.5·2^23: x + magic − magic rounds x to int
  constexpr float kMin = -87.3f;
  constexpr float kMax = 88.3f;
  float xc = select_float(x < kMin, kMin, x);
  xc = select_float(xc > kMax, kMax, xc);
  const float n = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent_bits = (static_cast<int32_t>(n) + 127) << 23;
  const float result = p * std::bit_cast<float>(exponent_bits);
  return select_float(x < kMin, 0.0f, result);  // NaN in, NaN out
}

// Σ x[i] in double.
inline double sum_double(const float* x, int64_t n) {
  return lane_sum(n, [x](int64_t i) { return static_cast<double>(x[i]); });
}

// Σ a[i]·b[i] in double.
inline double dot_double(const float* a, const float* b, int64_t n) {
  return lane_sum(n, [a, b](int64_t i) { return static_cast<double>(a[i]) * b[i]; });
}

// max_i x[i] for n ≥ 1 (max is exact, so the vectorised order does not matter).
inline float max_of(const float* x, int64_t n) {
  float m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// Columns per work item when a reduction over rows is split by columns (add_column_sums).
constexpr int64_t kColumnBlock = 64;

// out[n] += Σ_m term(m, n) for n < N (assign: out[n] = Σ, whatever out held): each column's
// terms summed in double from zero, rows in order, and added once; threads take blocks of
// kColumnBlock columns, so the order depends on nothing but M. term(m, n) returns the double to
// add (rmsnorm's dg, a bias's gradient).
template <typename Term>
void add_column_sums(float* out, int64_t M, int64_t N, bool parallel, Term term,
                     bool assign = false) {
  const int64_t blocks = (N + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t n0 = blk * kColumnBlock;
    const int64_t width = N - n0 < kColumnBlock ? N - n0 : kColumnBlock;
    double acc[kColumnBlock] = {};
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < width; ++j) acc[j] += term(m, n0 + j);
    for (int64_t j = 0; j < width; ++j)
      out[n0 + j] = assign ? static_cast<float>(acc[j]) : out[n0 + j] + static_cast<float>(acc[j]);
  }
}

// y[i] += alpha·x[i]
inline void axpy(float* __restrict y, float alpha, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace zt::cpu

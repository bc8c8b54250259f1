// DoRA's three ops on the CPU (backend/backend.h; the math is model/llama_lora.cpp's):
//   norms     n[o] = ‖W[o,:] + s·(B[o,:]·A)‖₂
//   scale     y (+)= (m/n + offset) ⊙ x, column by column
//   gradient  dm[o] += Σ_t dy[t,o]·z[t,o] / n[o]
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_staging.h"

namespace zt::cpu {

void CpuBackend::dora_weight_norms(float* norms, ConstTensorView w_view, ConstTensorView b_view,
                                   ConstTensorView a_view, float s, int64_t N, int64_t r, int64_t K,
                                   DType norm_type) {
  const Fp32Input w32(w_view, N * K), b32(b_view, N * r), a32(a_view, r * K);
  const float* w = w32.get();
  const float* b = b32.get();
  const float* a = a32.get();
#pragma omp parallel for schedule(static) if (N * K * r > kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    // Row n of W + s·(B·A): each element's B·A term summed in fp32 in rank order, as a GEMM of
    // rank r would, then scaled and added to W's element in fp32.
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) {
      float delta = 0;
      for (int64_t j = 0; j < r; ++j) delta += b[n * r + j] * a[j * K + k];
      row[static_cast<size_t>(k)] = w[n * K + k] + s * delta;
    }
    const double squares = lane_sum(K, [&](int64_t k) {
      return static_cast<double>(row[static_cast<size_t>(k)]) * row[static_cast<size_t>(k)];
    });
    norms[n] = static_cast<float>(std::sqrt(squares));
  }
  if (norm_type != DType::kFloat32) round_through_16bit(norm_type, norms, static_cast<size_t>(N));
}

void CpuBackend::dora_scale_columns(TensorView y_view, ConstTensorView x_view,
                                    ConstTensorView magnitude_view, const float* norms,
                                    float offset, int64_t M, int64_t N, bool accumulate) {
  const Fp32Input x32(x_view, M * N), m32(magnitude_view, N);
  Fp32Output y32(y_view, M * N,
                 accumulate ? Fp32Output::Contents::kKeep : Fp32Output::Contents::kOverwrite);
  const float* x = x32.get();
  const float* magnitude = m32.get();
  float* y = y32.get();
  std::vector<float> factor(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) factor[static_cast<size_t>(n)] = magnitude[n] / norms[n] + offset;
  const float* f = factor.data();
#pragma omp parallel for schedule(static) if (M * N > kParallelMinElements)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      y[m * N + n] = accumulate ? y[m * N + n] + f[n] * x[m * N + n] : f[n] * x[m * N + n];
  y32.commit();
}

void CpuBackend::dora_magnitude_grad(float* dm, ConstTensorView dy_view, ConstTensorView z_view,
                                     const float* norms, int64_t M, int64_t N) {
  const Fp32Input dy32(dy_view, M * N), z32(z_view, M * N);
  const float* dy = dy32.get();
  const float* z = z32.get();
  std::vector<float> sums(static_cast<size_t>(N), 0.0f);
  add_column_sums(sums.data(), M, N, M * N > kParallelMinElements, [&](int64_t m, int64_t n) {
    return static_cast<double>(dy[m * N + n]) * z[m * N + n];
  });
  for (int64_t n = 0; n < N; ++n) dm[n] += sums[static_cast<size_t>(n)] / norms[n];
}

}  // namespace zt::cpu

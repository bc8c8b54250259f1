// CPU backend: the linear layer (OpenBLAS sgemm), elementwise helpers and the factory.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include "backend/cpu/cpu_math.h"
#include "util/error.h"

namespace zt {

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<cpu::CpuBackend>();
}

namespace cpu {

// OpenBLAS splits a GEMM over rows and columns of C, never over the inner dimension, so each
// element's summation order does not depend on the number of BLAS threads.
void sgemm(bool transpose_a, bool transpose_b, int64_t rows, int64_t cols, int64_t inner,
           float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
           float* c, int64_t ldc) {
  if (rows == 0 || cols == 0) return;
  if (inner == 0) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j)
        c[r * ldc + j] = beta == 0.0f ? 0.0f : beta * c[r * ldc + j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(cols), static_cast<int>(inner), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// ---- linear layer ----
// Forward: y[M,N] = x[M,K] · w[N,K]ᵀ.
void CpuBackend::matmul_forward(float* y, const float* x, const float* w, int64_t M, int64_t N,
                                int64_t K) {
  sgemm(false, true, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
}

// Backward: dx[M,K] (= or +=) dy[M,N] · w[N,K];  dw[N,K] += dy[M,N]ᵀ · x[M,K].
void CpuBackend::matmul_backward(float* dx, float* dw, const float* dy, const float* x,
                                 const float* w, int64_t M, int64_t N, int64_t K,
                                 bool accumulate_dx) {
  if (dx) sgemm(false, false, M, K, N, 1.0f, dy, N, w, K, accumulate_dx ? 1.0f : 0.0f, dx, K);
  if (dw) sgemm(true, false, N, K, M, 1.0f, dy, N, x, K, 1.0f, dw, K);
}

// ---- elementwise helpers ----
void CpuBackend::add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::scale_inplace(float* y, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

void CpuBackend::to_bf16(bf16_t* out, const float* in, int64_t n) {
  floats_to_bf16(in, out, static_cast<size_t>(n));
}

void CpuBackend::from_bf16(float* out, const bf16_t* in, int64_t n) {
  bf16_to_floats(in, out, static_cast<size_t>(n));
}

}  // namespace cpu
}  // namespace zt

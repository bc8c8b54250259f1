// CPU backend: the linear layer (OpenBLAS sgemm), elementwise helpers and the factory.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>

#include "backend/cpu/cpu_math.h"
#include "util/error.h"

namespace zt {

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<cpu::CpuBackend>();
}

namespace cpu {
namespace {

// C[rows, cols] = alpha · op(A) · op(B) + beta · C, all row-major; `inner` is the contracted
// dimension. OpenBLAS splits a GEMM over rows and columns of C, never over the inner dimension,
// so each element's summation order does not depend on the number of BLAS threads.
void gemm(bool transpose_a, bool transpose_b, int64_t rows, int64_t cols, int64_t inner,
          const float* a, const float* b, float beta, float* c) {
  if (rows == 0 || cols == 0) return;
  if (inner == 0) {
    if (beta == 0.0f) std::fill(c, c + rows * cols, 0.0f);
    return;
  }
  const int64_t lda = transpose_a ? rows : inner;
  const int64_t ldb = transpose_b ? inner : cols;
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(cols), static_cast<int>(inner), 1.0f, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(cols));
}

}  // namespace

// ---- linear layer ----
// Forward: y[M,N] = x[M,K] · w[N,K]ᵀ.
void CpuBackend::matmul_forward(float* y, const float* x, const float* w, int64_t M, int64_t N,
                                int64_t K) {
  gemm(false, true, M, N, K, x, w, 0.0f, y);
}

// Backward: dx[M,K] (= or +=) dy[M,N] · w[N,K];  dw[N,K] += dy[M,N]ᵀ · x[M,K].
void CpuBackend::matmul_backward(float* dx, float* dw, const float* dy, const float* x,
                                 const float* w, int64_t M, int64_t N, int64_t K,
                                 bool accumulate_dx) {
  if (dx) gemm(false, false, M, K, N, dy, w, accumulate_dx ? 1.0f : 0.0f, dx);
  if (dw) gemm(true, false, N, K, M, dy, x, 1.0f, dw);
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

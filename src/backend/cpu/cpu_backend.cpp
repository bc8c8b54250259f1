// CPU backend: the linear layer (OpenBLAS sgemm), elementwise helpers and the factory.
#include "backend/cpu/cpu_backend.h"

#include "backend/dropout_hash.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_staging.h"
#include "util/error.h"

namespace zt {

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<cpu::CpuBackend>();
}

namespace cpu {

// An element of an OpenBLAS product depends on the shape of the call that computed it: its
// kernels treat tile edges differently (seen with the Haswell and Zen kernels), so when OpenBLAS
// splits C over its own threads the result changes with the thread count. Here the split is
// ours and fixed by the shape: C is cut into kGemmTileRows × kGemmTileCols tiles, each computed
// by one single-threaded OpenBLAS call, and OpenMP spreads the tiles over threads. Every element
// is therefore computed by the same call whatever OMP_NUM_THREADS or the BLAS thread setting is.
// The rows of the linear layers' products are tokens: when a micro-batch's B·T tokens are a
// multiple of kGemmTileRows, every token's row is computed by a tile of the same shape whatever
// B is, so the forward pass gives the same bits for a micro-batch of 8 as for two of 4.
constexpr int64_t kGemmTileRows = 128;
constexpr int64_t kGemmTileCols = 256;

void use_single_threaded_blas() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

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
  if (!omp_in_parallel()) use_single_threaded_blas();
  const int64_t row_tiles = (rows + kGemmTileRows - 1) / kGemmTileRows;
  const int64_t col_tiles = (cols + kGemmTileCols - 1) / kGemmTileCols;
  const int64_t tiles = row_tiles * col_tiles;
#pragma omp parallel for schedule(static) if (tiles > 1 && \
                                              rows * cols * inner > kParallelMinElements)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t r0 = t / col_tiles * kGemmTileRows;
    const int64_t c0 = t % col_tiles * kGemmTileCols;
    const int64_t tile_rows = std::min(kGemmTileRows, rows - r0);
    const int64_t tile_cols = std::min(kGemmTileCols, cols - c0);
    // op(A) rows r0.. and op(B) columns c0.. (row-major, leading dimensions unchanged).
    const float* a_tile = transpose_a ? a + r0 : a + r0 * lda;
    const float* b_tile = transpose_b ? b + c0 * ldb : b + c0;
    cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
                transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(tile_rows),
                static_cast<int>(tile_cols), static_cast<int>(inner), alpha, a_tile,
                static_cast<int>(lda), b_tile, static_cast<int>(ldb), beta, c + r0 * ldc + c0,
                static_cast<int>(ldc));
  }
}

// ---- linear layer ----
// Forward: y[M,N] = x[M,K] · w[N,K]ᵀ.
void CpuBackend::matmul_forward(TensorView y, ConstTensorView x, ConstTensorView w, int64_t M,
                                int64_t N, int64_t K) {
  const Fp32Input x32(x, M * K), w32(w, N * K);
  Fp32Output y32(y, M * N, Fp32Output::Contents::kOverwrite);
  sgemm(false, true, M, N, K, 1.0f, x32.get(), K, w32.get(), K, 0.0f, y32.get(), N);
  y32.commit();
}

// Onto a residual: y = residual + x·wᵀ, the product in fp32 first, then the residual added in
// fp32, rounded once.
void CpuBackend::matmul_forward_add(TensorView y, ConstTensorView x, ConstTensorView w,
                                    ConstTensorView residual, int64_t M, int64_t N, int64_t K) {
  ZT_CHECK(residual && y.data != residual.data,
           "matmul_forward_add: the residual is missing or aliases y");
  const Fp32Input x32(x, M * K), w32(w, N * K), r32(residual, M * N);
  Fp32Output y32(y, M * N, Fp32Output::Contents::kOverwrite);
  sgemm(false, true, M, N, K, 1.0f, x32.get(), K, w32.get(), K, 0.0f, y32.get(), N);
  float* out = y32.get();
  const float* r = r32.get();
  const int64_t n = M * N;
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) out[i] += r[i];
  y32.commit();
}

// Backward: dx[M,K] (= or +=) dy[M,N] · w[N,K];  dw[N,K] (+= or =) dy[M,N]ᵀ · x[M,K].
// β = 0 has OpenBLAS clear C before it adds the product, the very sums β = 1 adds to zeros.
void CpuBackend::matmul_backward(TensorView dx, float* dw, ConstTensorView dy, ConstTensorView x,
                                 ConstTensorView w, int64_t M, int64_t N, int64_t K,
                                 bool accumulate_dx, GradWrite dw_write) {
  const Fp32Input dy32(dy, M * N);
  if (dx) {
    const Fp32Input w32(w, N * K);
    Fp32Output dx32(dx, M * K,
                    accumulate_dx ? Fp32Output::Contents::kKeep : Fp32Output::Contents::kOverwrite);
    sgemm(false, false, M, K, N, 1.0f, dy32.get(), N, w32.get(), K, accumulate_dx ? 1.0f : 0.0f,
          dx32.get(), K);
    dx32.commit();
  }
  if (dw) {
    const Fp32Input x32(x, M * K);
    sgemm(true, false, N, K, M, 1.0f, dy32.get(), N, x32.get(), K,
          dw_write == GradWrite::kAdd ? 1.0f : 0.0f, dw, K);
  }
}

// ---- elementwise helpers ----
void CpuBackend::add_inplace(TensorView y_view, ConstTensorView x_view, int64_t n) {
  const Fp32Input x32(x_view, n);
  Fp32Output y32(y_view, n, Fp32Output::Contents::kKeep);
  const float* x = x32.get();
  float* y = y32.get();
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  y32.commit();
}

// ---- linear-layer bias ----
// Forward: y[m, n] += b[n].
void CpuBackend::bias_forward(TensorView y_view, ConstTensorView b_view, int64_t M, int64_t N) {
  const Fp32Input b32(b_view, N);
  Fp32Output y32(y_view, M * N, Fp32Output::Contents::kKeep);
  const float* b = b32.get();
  float* y = y32.get();
#pragma omp parallel for schedule(static) if (M * N > kParallelMinElements)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) y[m * N + n] += b[n];
  y32.commit();
}

// Backward: db[n] += Σ_m dy[m, n].
void CpuBackend::bias_backward(float* db, ConstTensorView dy_view, int64_t M, int64_t N) {
  const Fp32Input dy32(dy_view, M * N);
  const float* dy = dy32.get();
  add_column_sums(db, M, N, M * N > kParallelMinElements,
                  [&](int64_t m, int64_t n) { return static_cast<double>(dy[m * N + n]); });
}

void CpuBackend::scale_inplace(TensorView y_view, float s, int64_t n) {
  Fp32Output y32(y_view, n, Fp32Output::Contents::kKeep);
  float* y = y32.get();
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
  y32.commit();
}

void CpuBackend::dropout_forward(TensorView y_view, ConstTensorView x_view, int64_t M, int64_t K,
                                 float p, uint64_t stream, int64_t first_row) {
  const Fp32Input x32(x_view, M * K);
  Fp32Output y32(y_view, M * K, Fp32Output::Contents::kKeep);
  const float* x = x32.get();
  float* y = y32.get();
  const float scale = 1.0f / (1.0f - p);
  const auto base = static_cast<uint64_t>(first_row) * static_cast<uint64_t>(K);
#pragma omp parallel for schedule(static) if (M * K > kParallelMinElements)
  for (int64_t e = 0; e < M * K; ++e)
    y[e] = dropout_uniform(stream, base + static_cast<uint64_t>(e)) >= p ? x[e] * scale : 0.0f;
  y32.commit();
}

void CpuBackend::to_bf16(bf16_t* out, const float* in, int64_t n) {
  floats_to_bf16(in, out, static_cast<size_t>(n));
}

void CpuBackend::from_bf16(float* out, const bf16_t* in, int64_t n) {
  bf16_to_floats(in, out, static_cast<size_t>(n));
}

void CpuBackend::to_fp16(uint16_t* out, const float* in, int64_t n) {
  floats_to_fp16(in, out, static_cast<size_t>(n));
}

void CpuBackend::from_fp16(float* out, const uint16_t* in, int64_t n) {
  fp16_to_floats(in, out, static_cast<size_t>(n));
}

}  // namespace cpu
}  // namespace zt

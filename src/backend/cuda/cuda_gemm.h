// Row-major GEMMs (single or strided-batched) on cuBLASLt, fp32 accumulation.
//
// Element types: A and B are both float32 or both 16-bit (bf16 or fp16); C/D is either. fp32 A/B
// run in the backend's GemmCompute (bf16 tensor cores with fp32 accumulation by default, or
// exact fp32); 16-bit A/B run CUBLAS_COMPUTE_32F (16-bit products, fp32 accumulation). A 16-bit C
// is read (β ≠ 0) and D written once per element, rounded to nearest even from the fp32 result
// α·A·B + β·C: the backend contract's "computed in fp32, rounded once". C is D unless c_in is set
// (matmul_forward_add: the residual as C, of D's type and layout).
//
// Row-major ↔ column-major: a row-major matrix X[r, c] with leading dimension ld is, read by a
// column-major library, the matrix Xᵀ [c, r] with the same ld. So the row-major product
//     C[rows, cols] = α·op(A)·op(B) + β·C
// is computed as the column-major product of the transposes,
//     Cᵀ[cols, rows] = α·op(B)ᵀ·op(A)ᵀ + β·Cᵀ,
// i.e. cuBLAS gets (m, n, k) = (cols, rows, inner), its first operand is our B buffer and its
// second our A buffer, each with its own transpose flag and leading dimension unchanged:
//     cuBLAS A := B buffer, op = transpose_b ? T : N, stored [cols × inner] (N) or [inner × cols]
//     (T) cuBLAS B := A buffer, op = transpose_a ? T : N, stored [inner × rows] (N) or [rows ×
//     inner] (T) cuBLAS C := C buffer, [cols × rows], ldc
// The linear layer (x[M,K], w[N,K], y[M,N]) then reads:
//     forward  y  = x·wᵀ      rows=M cols=N inner=K  transpose_b   → cuBLAS (T, N), m=N n=M k=K
//     backward dx = dy·w      rows=M cols=K inner=N               → cuBLAS (N, N), m=K n=M k=N
//              dw += dyᵀ·x    rows=N cols=K inner=M  transpose_a  → cuBLAS (N, T), m=K n=N k=M,
//                                                                   β = 1
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "backend/cuda/gemm_compute.h"
#include "backend/gemm_tuning.h"
#include "util/dtype.h"

namespace zt::cuda {

struct RowMajorGemm {
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t rows = 0, cols = 0, inner = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* a = nullptr;
  int64_t lda = 0;
  int64_t stride_a = 0;  // elements between batch entries
  const void* b = nullptr;
  int64_t ldb = 0;
  int64_t stride_b = 0;
  void* c = nullptr;           // D, the output
  const void* c_in = nullptr;  // C when β ≠ 0 and it is not the output (same layout); null: c
  int64_t ldc = 0;
  int64_t stride_c = 0;
  int64_t batch = 1;
  DType a_type = DType::kFloat32;  // A and B: the same type
  DType b_type = DType::kFloat32;
  DType c_type = DType::kFloat32;
};

class LtGemm {
 public:
  LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes, GemmCompute compute);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Enqueues g on the stream. rows, cols or batch of 0 do nothing; inner = 0 sets D = β·C for
  // β ∈ {0, 1} (C is c_in when set, else D itself). The algorithm is chosen at a shape's first
  // call and cached per shape/alignment (the same shape always runs the same algorithm:
  // reproducible): cuBLASLt's heuristic's first choice, or under time_algorithms() the fastest of
  // its answers that computes the same bits (backend/gemm_tuning.h).
  void run(const RowMajorGemm& g);
  // As run(), but returns false (enqueuing nothing) where cuBLASLt has no algorithm for g, so
  // that a strided batch can fall back to single GEMMs. The answer is cached with the plan.
  bool try_run(const RowMajorGemm& g);

  // --gemm-algorithms timed: from now on, each new shape's first call times up to
  // kTimedCandidates of the heuristic's answers on its own operands, waiting for the stream
  // (docs/gpu.md, "GEMM algorithms"). Takes three device words for the output fingerprint.
  void time_algorithms();
  // The tally of the timed shapes, with the time saved over the calls made so far.
  GemmTuningReport tuning_report() const;
  static constexpr int kTimedCandidates = 8;

 private:
  struct Plan;
  Plan* plan_for(const RowMajorGemm& g);  // null: no algorithm
  cublasStatus_t launch(const Plan& plan, const RowMajorGemm& g, const cublasLtMatmulAlgo_t& algo);
  GemmFingerprint output_fingerprint(const RowMajorGemm& g);  // waits for the stream
  void tune(Plan& plan, const RowMajorGemm& g, cublasLtMatmulPreference_t preference);

  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  GemmCompute compute_;
  cublasLtHandle_t handle_ = nullptr;
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;  // null: no algorithm
  bool timing_ = false;
  static constexpr int kFingerprintWords = 3;       // hash, finite nonzero, non-finite
  unsigned long long* fingerprint_slot_ = nullptr;  // device; under time_algorithms()
  GemmTuningReport report_;
};

}  // namespace zt::cuda

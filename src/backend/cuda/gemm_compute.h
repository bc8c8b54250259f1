// The compute type of the CUDA backend's GEMMs (cuda_gemm.h), a backend option
// (cuda_backend.h); no CUDA header, so host code can name it.
#pragma once

namespace zt::cuda {

// Compute type of the GEMMs with fp32 operands (bf16 operands always run CUBLAS_COMPUTE_32F).
enum class GemmCompute {
  kBf16TensorCores,  // CUBLAS_COMPUTE_32F_FAST_16BF: bf16 products, fp32 accumulation
  kFp32,             // CUBLAS_COMPUTE_32F: exact fp32
};

}  // namespace zt::cuda

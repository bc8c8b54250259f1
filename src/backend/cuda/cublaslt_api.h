// cuBLASLt's entry points, bound at run time (util/cuda/runtime_library.h) when a CUDA backend's
// GEMMs are set up (LtGemm) or the version is asked for, not linked: a zerotrain process that
// makes no CUDA backend (every CPU run, prepare-data, estimate, export) does not pay the
// library's load. Each member has the type cublasLt.h declares, so a call through it is checked
// as the direct call was.
#pragma once
#include <cublasLt.h>

namespace zt::cuda {

struct CublasLtApi {
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  decltype(&cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) algo_config_get_attribute = nullptr;
};

// libcublasLt.so.<the cuBLAS major this build's header has>, loaded and bound once per process
// (thread-safe). Fails (zt::Error) naming the library, or the entry point it lacks, or a library of
// another major than the header's.
const CublasLtApi& cublaslt();

}  // namespace zt::cuda

#include "backend/cuda/cublaslt_api.h"

#include <string>

#include "util/cuda/runtime_library.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

CublasLtApi bind_cublaslt() {
  const RuntimeLibrary lib("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR),
                           "the CUDA backend's GEMMs",
                           "it ships with the CUDA toolkit (lib64) and in PyPI's nvidia-cublas "
                           "wheels; add its folder to LD_LIBRARY_PATH");
  CublasLtApi api;
  lib.bind(api.get_version, "cublasLtGetVersion");
  lib.bind(api.create, "cublasLtCreate");
  lib.bind(api.destroy, "cublasLtDestroy");
  lib.bind(api.matmul, "cublasLtMatmul");
  lib.bind(api.matmul_desc_create, "cublasLtMatmulDescCreate");
  lib.bind(api.matmul_desc_destroy, "cublasLtMatmulDescDestroy");
  lib.bind(api.matmul_desc_set_attribute, "cublasLtMatmulDescSetAttribute");
  lib.bind(api.matrix_layout_create, "cublasLtMatrixLayoutCreate");
  lib.bind(api.matrix_layout_destroy, "cublasLtMatrixLayoutDestroy");
  lib.bind(api.matrix_layout_set_attribute, "cublasLtMatrixLayoutSetAttribute");
  lib.bind(api.preference_create, "cublasLtMatmulPreferenceCreate");
  lib.bind(api.preference_destroy, "cublasLtMatmulPreferenceDestroy");
  lib.bind(api.preference_set_attribute, "cublasLtMatmulPreferenceSetAttribute");
  lib.bind(api.algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic");
  lib.bind(api.algo_config_get_attribute, "cublasLtMatmulAlgoConfigGetAttribute");
  // 10000·major + 100·minor + patch: the entry points above keep their types within a major.
  const size_t version = api.get_version();
  ZT_CHECK(version / 10000 == CUBLAS_VER_MAJOR,
           lib.soname() + " is cuBLASLt " + std::to_string(version) + ", not of the major " +
               std::to_string(CUBLAS_VER_MAJOR) + " zerotrain was built with");
  return api;
}

}  // namespace

const CublasLtApi& cublaslt() {
  static const CublasLtApi api = bind_cublaslt();
  return api;
}

}  // namespace zt::cuda

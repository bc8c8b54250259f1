#include "backend/cuda/cuda_check.h"

#include <string>

#include "util/error.h"

namespace zt::cuda {
namespace {

std::string where(const char* file, int line) {
  return " (" + std::string(file) + ":" + std::to_string(line) + ")";
}

}  // namespace

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  fail(std::string(call) + " failed: " + cudaGetErrorName(status) + ": " +
       cudaGetErrorString(status) + where(file, line));
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(std::string(call) + " failed: " + cublasGetStatusString(status) + " (status " +
       std::to_string(static_cast<int>(status)) + ")" + where(file, line));
}

}  // namespace zt::cuda

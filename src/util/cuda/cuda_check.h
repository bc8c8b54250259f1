// Error checking for CUDA runtime, cuBLAS(Lt) and kernel launches: every call goes through a
// macro that throws zt::Error "<call> failed: <library message> (<file>:<line>)".
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace zt::cuda {

void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace zt::cuda

#define ZT_CUDA_CHECK(call) ::zt::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define ZT_CUBLAS_CHECK(call) ::zt::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface through cudaGetLastError.
#define ZT_CUDA_CHECK_LAUNCH(kernel_name) \
  ::zt::cuda::check_cuda(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)

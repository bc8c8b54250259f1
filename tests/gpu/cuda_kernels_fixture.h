// The CudaKernels suite's fixture (test_cuda_kernels.cpp, test_cuda_rope.cpp): the CPU backend
// and a CUDA backend with fp32 GEMMs, whose kernels the tests compare.
#pragma once
#include <gtest/gtest.h>

#include <memory>

#include "gpu_test_util.h"

namespace zt::gpu_test {

class CudaKernels : public ::testing::Test {
 protected:
  cpu::CpuBackend cpu_;
  std::unique_ptr<cuda::CudaBackend> gpu_ =
      make_cuda_backend(0, test_options(cuda::GemmCompute::kFp32));
};

}  // namespace zt::gpu_test

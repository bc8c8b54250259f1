// zt_gpu_tests: exits 77 (CTest SKIP_RETURN_CODE) when no CUDA device is visible; otherwise runs
// the GoogleTest suites inside an MPI runtime (a singleton without a launcher) for the
// communicator tests.
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_devices.h"
#include "runtime/mpi_runtime.h"

int main(int argc, char** argv) {
  if (zt::cuda_device_count() == 0) {
    std::printf("zt_gpu_tests: no CUDA device visible (cudaGetDeviceCount failed or is 0): SKIP\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  zt::MpiRuntime mpi(&argc, &argv);
  return RUN_ALL_TESTS();
}

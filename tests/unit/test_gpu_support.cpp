// What a run on a GPU is told without one: whether the CUDA backend can run on a device of a given
// compute capability (backend/backend_choice.h), and the dense bf16 peak its MFU divides by
// (report/run_recorder.h), from the names cudaGetDeviceProperties gives real GPUs.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "backend/backend_choice.h"
#include "report/run_recorder.h"

namespace zt {
namespace {

TEST(GpuSupport, DevicesBelowComputeCapabilityEightAreRefusedNamingThem) {
  EXPECT_EQ(cuda_device_support_problem(0, "NVIDIA A100-SXM4-80GB", 8, 0), "");
  EXPECT_EQ(cuda_device_support_problem(0, "NVIDIA GeForce RTX 4090", 8, 9), "");
  EXPECT_EQ(cuda_device_support_problem(0, "NVIDIA H100 80GB HBM3", 9, 0), "");
  EXPECT_EQ(cuda_device_support_problem(0, "NVIDIA B200", 10, 0), "");  // compute_80 PTX
  const std::string t4 = cuda_device_support_problem(3, "Tesla T4", 7, 5);
  for (const char* part : {"GPU 3 (Tesla T4)", "compute capability 7.5", "8.0", "--backend cpu"})
    EXPECT_NE(t4.find(part), std::string::npos) << part << " not in: " << t4;
  EXPECT_NE(cuda_device_support_problem(0, "Tesla V100-SXM2-32GB", 7, 0), "");
}

TEST(GpuSupport, MfuPeakFollowsTheDatasheetOfEachVariant) {
  // The CUDA backend's name: "cuda:" and the device name in lower case.
  const std::pair<const char*, std::optional<double>> cases[] = {
      {"cuda:nvidia h100 80gb hbm3", 989.0},  // SXM
      {"cuda:nvidia h100 pcie", 756.0},
      {"cuda:nvidia h100 nvl", 835.0},
      {"cuda:nvidia h200", 989.0},
      {"cuda:nvidia h200 nvl", 835.0},
      {"cuda:nvidia gh200 480gb", 989.0},
      {"cuda:nvidia b200", 2250.0},
      {"cuda:nvidia gb200", 2500.0},
      {"cuda:nvidia a100-sxm4-80gb", 312.0},
      {"cuda:nvidia a100 80gb pcie", 312.0},
      {"cuda:nvidia l40s", 362.0},
      {"cuda:nvidia h800", 989.0},
      {"cuda:nvidia rtx a1000 laptop gpu", std::nullopt},  // not an A100
      {"cuda:nvidia rtx a100x", std::nullopt},
      {"cuda:nvidia geforce rtx 4090", std::nullopt},  // not in the table: no MFU, not a guess
      {"cpu", std::nullopt},
      {"cpu:h100", std::nullopt}};
  for (const auto& [name, peak] : cases) EXPECT_EQ(dense_bf16_peak_tflops(name), peak) << name;
}

}  // namespace
}  // namespace zt

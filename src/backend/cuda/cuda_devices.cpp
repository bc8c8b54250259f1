// Which CUDA devices this process sees and what they are (cuda_devices.h).
#include "backend/cuda/cuda_devices.h"

#include <cuda_runtime.h>

#include <string>

#include "backend/backend_choice.h"
#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver/device" error
    return 0;
  }
  return count;
}

int cuda_compute_capability_major(int device) {
  int major = 0;
  ZT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

std::string cuda_device_uuid(int device) {
  cudaDeviceProp properties{};
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (const char byte : properties.uuid.bytes) {
    const auto b = static_cast<unsigned char>(byte);
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return hex;
}

void check_cuda_device_supported(int device) {
  cudaDeviceProp prop{};
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const std::string unsupported =
      cuda_device_support_problem(device, prop.name, prop.major, prop.minor);
  ZT_CHECK(unsupported.empty(), "CUDA backend: " + unsupported);
}

}  // namespace zt

// Which CUDA devices this process sees and what they are: the count, a device's compute
// capability and UUID, and whether the CUDA backend runs on it. Used by the device choice
// (app/engine_device.cpp) and by the backend's construction.
#pragma once
#include <string>

namespace zt {

// Number of CUDA devices this process sees; 0 when there is no driver or no device.
int cuda_device_count();
// The major compute capability of `device` (8 for A100, 9 for H100/H200); zt::Error when the
// device does not exist.
int cuda_compute_capability_major(int device);
// Fails naming `device`, its name and compute capability when the CUDA backend cannot run on it
// (cuda_device_support_problem, backend/backend_choice.h).
void check_cuda_device_supported(int device);
// The UUID of `device` as 32 hex digits: one physical GPU (or MIG instance) whichever host,
// CUDA_VISIBLE_DEVICES or index shows it; zt::Error when the device does not exist.
std::string cuda_device_uuid(int device);

}  // namespace zt

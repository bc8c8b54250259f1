// The CUDA backend's kernel profiler (backend/kernel_profile.h): CUPTI's activity API records
// every kernel, copy and memset the process issues between start() and stop(), with device
// timestamps. Built when CUPTI is found (cmake/zt_cuda.cmake, files cupti_*).
#pragma once
#include <memory>

#include "backend/kernel_profile.h"

namespace zt::cuda {

// One per process at a time: CUPTI's activity buffers are process-wide. Throws zt::Error when
// CUPTI refuses (another profiler, such as nsys, holding it), naming the call.
std::unique_ptr<KernelProfiler> make_cupti_kernel_profiler();

}  // namespace zt::cuda

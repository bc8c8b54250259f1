// --backend cpu|cuda|auto: which compute backend a run uses (no CUDA needed to decide).
#pragma once
#include <string>

namespace zt {

enum class BackendKind { kCpu, kCuda };
// What --backend asks for: a backend, or auto (decided by this host).
enum class BackendRequest { kCpu, kCuda, kAuto };

// "cpu" | "cuda" | "auto"; anything else is a zt::Error naming --backend and the value.
BackendRequest parse_backend_request(const std::string& text);
const char* backend_request_name(BackendRequest request);

// cpu → CPU. cuda → CUDA, or zt::Error when the build has no CUDA backend or no GPU is visible.
// auto → CUDA when built with it and visible_gpus > 0, else CPU. `what` prefixes messages (e.g.
// "train").
BackendKind resolve_backend(BackendRequest requested, bool built_with_cuda, int visible_gpus,
                            const std::string& what);
const char* backend_kind_name(BackendKind kind);  // "cpu" / "cuda"

// Why the CUDA backend cannot run on GPU `device` (`name`, compute capability major.minor); ""
// when it can. Its kernels are built for compute capability 8.0 and newer (sm_80 and sm_90a code,
// and compute_80 PTX that the driver compiles for later GPUs, cmake/zt_cuda.cmake): the GPUs with
// bf16 tensor cores, which cuDNN's bf16 attention needs too.
std::string cuda_device_support_problem(int device, const std::string& name, int major, int minor);

}  // namespace zt

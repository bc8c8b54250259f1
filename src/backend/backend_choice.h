// --backend cpu|cuda|auto: which compute backend a run uses (no CUDA needed to decide).
#pragma once
#include <string>

namespace zt {

enum class BackendKind { kCpu, kCuda };

// cpu → CPU. cuda → CUDA, or zt::Error when the build has no CUDA backend or no GPU is visible.
// auto → CUDA when built with it and visible_gpus > 0, else CPU. Anything else is an error naming
// the value. `what` prefixes messages (e.g. "train").
BackendKind resolve_backend(const std::string& requested, bool built_with_cuda, int visible_gpus,
                            const std::string& what);
const char* backend_kind_name(BackendKind kind);  // "cpu" / "cuda"

}  // namespace zt

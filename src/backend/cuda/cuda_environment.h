// What this build's CUDA side finds on this host, for `zerotrain info --env`
// (docs/troubleshooting.md, "Checking an installation"): the CUDA runtime and driver versions,
// cuBLASLt's, cuDNN's when the fused attention is compiled in, and every device this process sees
// with its memory. Nothing here throws: a missing driver or device becomes a "missing" sentence in
// the JSON instead.
#pragma once
#include <nlohmann/json.hpp>

namespace zt::cuda {

// {"runtime", "driver", "cublaslt", "cudnn", "devices": [{index, name, compute_capability,
// memory_bytes, pci_bus}], "missing": [...]}; versions as "major.minor[.patch]" or null.
nlohmann::json cuda_environment();

}  // namespace zt::cuda

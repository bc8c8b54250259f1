#include "backend/cuda/cuda_environment.h"

#include <cuda_runtime_api.h>

#include <string>

#include "backend/cuda/cublaslt_api.h"
#include "util/error.h"

#if ZEROTRAIN_HAVE_CUDNN
#include "backend/cuda/cudnn_attention.h"
#endif

namespace zt::cuda {

namespace {

// CUDA's integer versions: 1000·major + 10·minor (13000 → "13.0").
std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// cuBLAS(Lt) and cuDNN 9: 10000·major + 100·minor + patch (130100 → "13.1.0").
std::string library_version_text(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
         std::to_string(v % 100);
}

}  // namespace

nlohmann::json cuda_environment() {
  nlohmann::json out = {{"missing", nlohmann::json::array()}};
  int runtime = 0;
  out["runtime"] = cudaRuntimeGetVersion(&runtime) == cudaSuccess
                       ? nlohmann::json(cuda_version_text(runtime))
                       : nlohmann::json(nullptr);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    out["driver"] = cuda_version_text(driver);
  } else {
    out["driver"] = nullptr;
    out["missing"].push_back("no CUDA driver (libcuda) on this host");
  }
  try {  // loaded here, at run time: a host without it is reported, not refused
    out["cublaslt"] = library_version_text(cublaslt().get_version());
  } catch (const Error& e) {
    out["cublaslt"] = nullptr;
    out["missing"].push_back(e.what());
  }
#if ZEROTRAIN_HAVE_CUDNN
  out["cudnn"] = library_version_text(cudnn_library_version());
#else
  out["cudnn"] = nullptr;
  out["missing"].push_back("built without cuDNN: --attention fused is not available");
#endif
  nlohmann::json devices = nlohmann::json::array();
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    out["missing"].push_back(std::string("no CUDA device: ") + cudaGetErrorString(status));
    cudaGetLastError();  // clear the sticky error
    count = 0;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      out["missing"].push_back("device " + std::to_string(d) + ": properties unreadable");
      cudaGetLastError();
      continue;
    }
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) != cudaSuccess) cudaGetLastError();
    devices.push_back(
        {{"index", d},
         {"name", p.name},
         {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
         {"memory_bytes", static_cast<uint64_t>(p.totalGlobalMem)},
         {"pci_bus", bus}});
  }
  out["devices"] = devices;
  return out;
}

}  // namespace zt::cuda

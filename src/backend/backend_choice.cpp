#include "backend/backend_choice.h"

#include "util/error.h"

namespace zt {

BackendKind resolve_backend(const std::string& requested, bool built_with_cuda, int visible_gpus,
                            const std::string& what) {
  if (requested == "cpu") return BackendKind::kCpu;
  if (requested == "auto") {
    return built_with_cuda && visible_gpus > 0 ? BackendKind::kCuda : BackendKind::kCpu;
  }
  ZT_CHECK(requested == "cuda",
           what + ": --backend must be cpu, cuda or auto, got '" + requested + "'");
  ZT_CHECK(built_with_cuda, what +
                                ": --backend cuda: this zerotrain was built without the CUDA "
                                "backend (configure with -DZEROTRAIN_CUDA=ON on a host with nvcc)");
  ZT_CHECK(visible_gpus > 0, what +
                                 ": --backend cuda: no CUDA device is visible (check "
                                 "CUDA_VISIBLE_DEVICES and the driver)");
  return BackendKind::kCuda;
}

const char* backend_kind_name(BackendKind kind) {
  return kind == BackendKind::kCuda ? "cuda" : "cpu";
}

}  // namespace zt

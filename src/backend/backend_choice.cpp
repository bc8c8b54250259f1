#include "backend/backend_choice.h"

#include "util/error.h"
#include "util/word_choice.h"

namespace zt {

namespace {

constexpr WordChoice<BackendRequest> kBackendWords[] = {{BackendRequest::kCpu, "cpu"},
                                                        {BackendRequest::kCuda, "cuda"},
                                                        {BackendRequest::kAuto, "auto"}};

}  // namespace

BackendRequest parse_backend_request(const std::string& text) {
  return parse_word(text, kBackendWords, "--backend");
}

const char* backend_request_name(BackendRequest request) {
  return word_of(request, kBackendWords);
}

BackendKind resolve_backend(BackendRequest requested, bool built_with_cuda, int visible_gpus,
                            const std::string& what) {
  if (requested == BackendRequest::kCpu) return BackendKind::kCpu;
  if (requested == BackendRequest::kAuto)
    return built_with_cuda && visible_gpus > 0 ? BackendKind::kCuda : BackendKind::kCpu;
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

std::string cuda_device_support_problem(int device, const std::string& name, int major, int minor) {
  if (major >= 8) return "";
  return "GPU " + std::to_string(device) + " (" + name + ") has compute capability " +
         std::to_string(major) + "." + std::to_string(minor) +
         "; zerotrain's CUDA backend needs 8.0 or newer (A100, H100 and later: bf16 tensor "
         "cores). Train on the CPU with --backend cpu, or choose another GPU "
         "(CUDA_VISIBLE_DEVICES)";
}

}  // namespace zt

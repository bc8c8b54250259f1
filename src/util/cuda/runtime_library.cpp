#include "util/cuda/runtime_library.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <utility>

#include "util/error.h"

namespace zt::cuda {
namespace {

std::string last_dl_error() {
  const char* why = dlerror();
  return why ? why : "not found";
}

// The folder of the libcudart this process runs on ("" when it cannot be told).
std::string cuda_runtime_folder() {
  Dl_info info{};
  const void* runtime_symbol = reinterpret_cast<const void*>(&cudaRuntimeGetVersion);
  if (dladdr(runtime_symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

}  // namespace

RuntimeLibrary::RuntimeLibrary(std::string soname, const std::string& purpose,
                               const std::string& remedy)
    : soname_(std::move(soname)), purpose_(purpose) {
  handle_ = dlopen(soname_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ != nullptr) return;
  std::string why = last_dl_error();
  const std::string folder = cuda_runtime_folder();
  if (!folder.empty()) {
    const std::string beside = folder + "/" + soname_;
    handle_ = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) return;
    why += "; " + last_dl_error();
  }
  fail(purpose_ + ": cannot load " + soname_ + " (" + why + "): " + remedy);
}

void* RuntimeLibrary::address_of(const char* symbol) const {
  void* address = dlsym(handle_, symbol);
  ZT_CHECK(address != nullptr, purpose_ + ": " + soname_ + " has no " + symbol);
  return address;
}

}  // namespace zt::cuda

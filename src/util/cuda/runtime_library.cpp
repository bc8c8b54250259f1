#include "util/cuda/runtime_library.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <climits>
#include <string>
#include <utility>

#include "util/error.h"

namespace zt::cuda {
namespace {

std::string last_dl_error() {
  const char* why = dlerror();
  return why ? why : "not found";
}

// The folder of the libcudart this process runs on ("" when it cannot be told), asked of the
// loaded library itself: in an executable built without PIE, the address of a cudart function
// would be the executable's own call stub, not the library's.
std::string cuda_runtime_folder() {
  const std::string soname = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  void* handle = dlopen(soname.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return "";
  char origin[PATH_MAX] = {};
  const bool known = dlinfo(handle, RTLD_DI_ORIGIN, origin) == 0;
  dlclose(handle);
  return known ? std::string(origin) : "";
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

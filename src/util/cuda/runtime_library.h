// A CUDA library opened at run time (dlopen) instead of linked, for two reasons: a library only one
// feature needs (CUPTI, for --profile-steps) must not stop zerotrain from starting where it is
// missing; and one whose loading costs every process (cuBLASLt: about 100 MB of relocations, some
// 85 ms and 25k page faults at each start, GPU or not) is paid only by a process that uses it.
#pragma once
#include <string>

namespace zt::cuda {

class RuntimeLibrary {
 public:
  // Opens `soname` (RTLD_NOW | RTLD_LOCAL) where the dynamic loader looks (LD_LIBRARY_PATH, the
  // executable's RUNPATH, the system's), else in the folder of the libcudart this process runs on,
  // so that it comes from the same CUDA install. Fails (zt::Error) naming the library, `purpose`
  // (what needs it) and `remedy` (where to get it). The library stays loaded for the process.
  RuntimeLibrary(std::string soname, const std::string& purpose, const std::string& remedy);

  // fn ← the library's `symbol`, typed as the header declares it (decltype(&cublasLtMatmul));
  // fails naming the library and the symbol when it has none.
  template <class Fn>
  void bind(Fn*& fn, const char* symbol) const {
    fn = reinterpret_cast<Fn*>(address_of(symbol));
  }

  const std::string& soname() const { return soname_; }

 private:
  void* address_of(const char* symbol) const;

  std::string soname_, purpose_;
  void* handle_ = nullptr;
};

}  // namespace zt::cuda

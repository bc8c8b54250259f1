// cuBLASLt opened at run time (backend/cuda/cublaslt_api.h), on any machine with the CUDA toolkit
// and no GPU: a process does not map the library until its first use (zerotrain does not link it:
// its load costs every start ~85 ms), then has every entry point, of the header's major. And the
// loader's errors name the library, what needed it and the missing symbol.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "../support/error_text.h"
#include "backend/cuda/cublaslt_api.h"
#include "util/cuda/runtime_library.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

bool mapped_in_this_process(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(library) != std::string::npos) return true;
  }
  return false;
}

// The mapping is checked in a fresh process (gtest's threadsafe death-test style re-executes the
// binary for this statement alone), so that the result does not depend on whether another test
// of the same process loaded the library first: exit 0 when it was unmapped at start and mapped
// after the first use.
TEST(CublasLtLoad, MappedAtTheFirstUseNotAtStart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const bool at_start = mapped_in_this_process("libcublasLt.so");
        cublaslt();
        std::exit(!at_start && mapped_in_this_process("libcublasLt.so") ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Every entry point of the header's major, bound once.
TEST(CublasLtLoad, HasEveryEntryPointOfTheHeadersMajor) {
  const CublasLtApi& api = cublaslt();
  EXPECT_TRUE(mapped_in_this_process("libcublasLt.so"));
  EXPECT_EQ(api.get_version() / 10000, size_t{CUBLAS_VER_MAJOR});
  for (const void* entry :
       {reinterpret_cast<const void*>(api.create), reinterpret_cast<const void*>(api.destroy),
        reinterpret_cast<const void*>(api.matmul),
        reinterpret_cast<const void*>(api.matmul_desc_create),
        reinterpret_cast<const void*>(api.matmul_desc_destroy),
        reinterpret_cast<const void*>(api.matmul_desc_set_attribute),
        reinterpret_cast<const void*>(api.matrix_layout_create),
        reinterpret_cast<const void*>(api.matrix_layout_destroy),
        reinterpret_cast<const void*>(api.matrix_layout_set_attribute),
        reinterpret_cast<const void*>(api.preference_create),
        reinterpret_cast<const void*>(api.preference_destroy),
        reinterpret_cast<const void*>(api.preference_set_attribute),
        reinterpret_cast<const void*>(api.algo_get_heuristic),
        reinterpret_cast<const void*>(api.algo_config_get_attribute)}) {
    EXPECT_NE(entry, nullptr);
  }
  EXPECT_EQ(&cublaslt(), &api);  // bound once
}

TEST(RuntimeLibrary, AMissingLibraryOrSymbolIsNamed) {
  const std::string missing_library = error_of(
      [] { RuntimeLibrary("libzt_no_such_library.so.1", "a test's purpose", "a test's remedy"); });
  for (const char* part : {"libzt_no_such_library.so.1", "a test's purpose", "a test's remedy"}) {
    EXPECT_NE(missing_library.find(part), std::string::npos) << missing_library;
  }
  const std::string missing_symbol = error_of([] {
    const RuntimeLibrary lib("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR), "a test", "");
    void (*fn)() = nullptr;
    lib.bind(fn, "cublasLtNoSuchEntryPoint");
  });
  EXPECT_NE(missing_symbol.find("has no cublasLtNoSuchEntryPoint"), std::string::npos)
      << missing_symbol;
}

}  // namespace
}  // namespace zt::cuda

// The kernel profiler's CUPTI loader, on any machine with the CUDA toolkit and no GPU: making a
// profiler loads libcupti.so.<CUDA major> and binds its entry points (start() needs a GPU), and a
// second profiler while one lives is refused (CUPTI's activity buffers are process-wide).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/cuda/cupti_kernel_profiler.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

TEST(CuptiLoad, LoadsTheLibraryAndAllowsOneProfilerAtATime) {
  std::unique_ptr<KernelProfiler> first = make_cupti_kernel_profiler();
  ASSERT_NE(first, nullptr);
  try {
    make_cupti_kernel_profiler();
    ADD_FAILURE() << "a second profiler was made while the first lives";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one kernel profiler per process"), std::string::npos)
        << e.what();
  }
  first.reset();
  EXPECT_NE(make_cupti_kernel_profiler(), nullptr);  // free again
}

}  // namespace
}  // namespace zt::cuda

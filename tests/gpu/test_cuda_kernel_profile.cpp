// The CUPTI kernel profiler (train --profile-steps) on a GPU: it records the backend's GEMMs,
// its own kernels and the copies between start() and stop(), each in its category, within a
// window that holds them, and records nothing outside that window, nor what discard() dropped.
#include <gtest/gtest.h>

#include <vector>

#include "backend/kernel_profile.h"
#include "gpu_test_util.h"

namespace zt::gpu_test {
namespace {

TEST(CudaKernelProfile, RecordsTheBackendsKernelsAndCopiesInTheirCategories) {
  auto gpu = make_cuda_backend(0);
  const int64_t M = 256, N = 512, K = 384;
  DeviceBuffer<float> x(random_floats(M * K, 1)), w(random_floats(N * K, 2)), y(M * N);
  DeviceBuffer<double> norm(1);
  gpu->matmul_forward(y.get(), x.get(), w.get(), M, N, K);  // before the window: not recorded
  gpu->synchronize();
  std::unique_ptr<KernelProfiler> profiler = gpu->make_kernel_profiler();
  for (int round = 0; round < 2; ++round) {  // a profiler records more than one window
    profiler->start();
    const uint64_t begin = profiler->now();
    gpu->matmul_forward(y.get(), x.get(), w.get(), M, N, K);
    gpu->matmul_forward(y.get(), x.get(), w.get(), M, N, K);
    gpu->scale_inplace(y.get(), 0.5f, M * N);         // pointwise (LoRA's scaled products use it)
    gpu->sum_squares_to(norm.get(), y.get(), M * N);  // optimizer: partial sums, then their sum
    x.upload(random_floats(M * K, 3));                // a host-to-device copy
    const uint64_t end = profiler->now();
    const KernelProfiler::Recording r = profiler->stop();
    const KernelProfile p = summarize_kernel_profile(r.activities, {{begin, end}}, 1);
    auto of = [&](KernelCategory c) { return p.categories[static_cast<size_t>(c)]; };
    EXPECT_GE(of(KernelCategory::kGemm).calls, 2) << kernel_profile_table(p);
    EXPECT_EQ(of(KernelCategory::kPointwise).calls, 1) << kernel_profile_table(p);
    EXPECT_EQ(of(KernelCategory::kOptimizer).calls, 2) << kernel_profile_table(p);
    EXPECT_GE(of(KernelCategory::kCopies).calls, 1) << kernel_profile_table(p);
    // cuBLASLt may add helper kernels of its own; ours and the GEMMs must not land in "other".
    for (const KernelProfile::Row& row : p.rows) {
      if (row.category == KernelCategory::kOther) {
        EXPECT_EQ(row.name.find("zt::"), std::string::npos) << row.name;
      }
    }
    EXPECT_GT(p.busy_ns, 0u);
    EXPECT_LE(p.busy_ns, p.window_ns);
    EXPECT_EQ(r.dropped_records, 0);
    EXPECT_EQ(r.untimed_records, 0);
    for (const DeviceActivity& a : r.activities) {  // nothing from before start()
      EXPECT_GE(a.start_ns, begin) << a.name;
      EXPECT_LE(a.end_ns, end) << a.name;
    }
    std::printf("round %d:\n%s", round, kernel_profile_table(p).c_str());
  }
}

// discard() drops what the window recorded so far (a CUDA graph's recording, which replays
// later): after it, only what follows is recorded.
TEST(CudaKernelProfile, DiscardDropsWhatCameBeforeIt) {
  auto gpu = make_cuda_backend(0);
  const int64_t M = 256, N = 512, K = 384;
  DeviceBuffer<float> x(random_floats(M * K, 1)), w(random_floats(N * K, 2)), y(M * N);
  std::unique_ptr<KernelProfiler> profiler = gpu->make_kernel_profiler();
  profiler->start();
  gpu->matmul_forward(y.get(), x.get(), w.get(), M, N, K);  // discarded
  profiler->discard();
  const uint64_t begin = profiler->now();
  gpu->scale_inplace(y.get(), 0.5f, M * N);
  const uint64_t end = profiler->now();
  const KernelProfiler::Recording r = profiler->stop();
  const KernelProfile p = summarize_kernel_profile(r.activities, {{begin, end}}, 1);
  auto of = [&](KernelCategory c) { return p.categories[static_cast<size_t>(c)]; };
  EXPECT_EQ(of(KernelCategory::kGemm).calls, 0) << kernel_profile_table(p);
  EXPECT_EQ(of(KernelCategory::kPointwise).calls, 1) << kernel_profile_table(p);
  EXPECT_EQ(r.dropped_records, 0);
  for (const DeviceActivity& a : r.activities) EXPECT_GE(a.start_ns, begin) << a.name;
}

}  // namespace
}  // namespace zt::gpu_test

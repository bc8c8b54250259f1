// Guarded device memory (tests/support/guarded_device.h) can fail: a host read of a device buffer
// outside an access scope kills the process and the guarded backend refuses host tensors. The MPI
// suite GuardedDeviceTest relies on these to prove the engine is GPU-clean.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/llama.h"
#include "support/guarded_device.h"
#include "util/error.h"

namespace zt {
namespace {

TEST(GuardedDeviceMemory, HostReadOutsideAnAccessScopeCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GuardedDeviceMemory device;
  auto* p = static_cast<volatile float*>(device.allocate(64, MemCategory::kCommBuffers));
  EXPECT_DEATH({ [[maybe_unused]] const float x = p[3]; }, "");
  {
    GuardedDeviceMemory::Access access(device);
    EXPECT_EQ(p[3], 0.0f);  // zero-filled, readable inside a scope
  }
  device.release(const_cast<float*>(p), 64);
  EXPECT_EQ(device.live_buffers(), 0u);
}

TEST(GuardedDeviceMemory, CopiesRoundTripAndRangesAreChecked) {
  GuardedDeviceMemory device;
  auto* d = static_cast<float*>(device.allocate(8 * sizeof(float), MemCategory::kCommBuffers));
  const std::vector<float> in = {1, 2, 3, 4, 5, 6, 7, 8};
  device.to_device(d, in.data(), in.size() * sizeof(float));
  device.copy(d + 4, d, 4 * sizeof(float));
  std::vector<float> out(8);
  device.to_host(out.data(), d, out.size() * sizeof(float));
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4}));
  EXPECT_TRUE(device.contains(d + 2, 6 * sizeof(float)));
  EXPECT_FALSE(device.contains(in.data(), sizeof(float)));
  // Past the page the buffer was rounded up to.
  EXPECT_FALSE(device.contains(d, size_t{1} << 20));
  EXPECT_THROW(device.to_host(out.data(), in.data(), sizeof(float)), Error);
  device.release(d, 8 * sizeof(float));
}

// Asynchronous copies land at the wait that covers them, in issue order: a program that reads a
// destination or rewrites a source before waiting sees the race a copy stream would give it.
TEST(GuardedDeviceMemory, AsyncCopiesLandAtTheirWait) {
  GuardedDeviceMemory device;
  auto* d = static_cast<float*>(device.allocate(4 * sizeof(float), MemCategory::kCommBuffers));
  std::vector<float> staging = {1, 2, 3, 4}, out(4, -1.0f);
  device.to_device_async(d, staging.data(), 2 * sizeof(float));
  const uint64_t first = device.mark_copies();
  device.to_device_async(d + 2, staging.data() + 2, 2 * sizeof(float));
  staging[2] = 30;  // rewritten before its copy was waited for: the device gets 30
  device.to_host(out.data(), d, 4 * sizeof(float));
  EXPECT_EQ(out, (std::vector<float>{0, 0, 0, 0}));  // nothing has landed yet
  device.wait_copies_until(first);
  EXPECT_EQ(device.pending_copies(), 1u);
  out.assign(4, -1.0f);
  device.to_host_async(out.data(), d, 4 * sizeof(float));
  EXPECT_EQ(out[0], -1.0f);  // not before the wait
  device.wait_copies();
  EXPECT_EQ(out, (std::vector<float>{1, 2, 30, 4}));
  EXPECT_EQ(device.pending_copies(), 0u);
  device.release(d, 4 * sizeof(float));
}

TEST(GuardedBackend, RefusesHostTensorsNamingTheArgument) {
  GuardedDeviceMemory device;
  auto cpu = make_cpu_backend();
  auto backend = make_guarded_backend(*cpu, device);
  auto* d = static_cast<float*>(device.allocate(16 * sizeof(float), MemCategory::kCommBuffers));
  std::vector<float> host(16, 1.0f);
  try {
    backend->add_inplace(d, host.data(), 16);
    ADD_FAILURE() << "a host tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_inplace x"), std::string::npos) << e.what();
  }
  // Device tensors compute as the wrapped backend does.
  device.to_device(d, host.data(), 16 * sizeof(float));
  backend->scale_inplace(d, 3.0f, 16);
  EXPECT_DOUBLE_EQ(backend->sum_squares(d, 16), 16 * 9.0);
  device.release(d, 16 * sizeof(float));
}

// A model's buffers are accounted on the memory its backend allocates from: a tracker built on
// other memory is refused at once, naming the backend, instead of accounting the wrong pool.
TEST(GuardedDeviceMemory, ModelRefusesATrackerOnAnotherDeviceMemory) {
  auto cpu = make_cpu_backend();
  GuardedDeviceMemory device;
  auto guarded = make_guarded_backend(*cpu, device);
  MemoryTracker host_tracker;  // host_device_memory(), the CPU backend's
  try {
    LlamaModel model(preset_config("tiny"), *guarded, host_tracker, 1, 8);
    FAIL() << "a tracker on host memory was accepted for the guarded backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory tracker"), std::string::npos) << e.what();
  }
  MemoryTracker tracker(guarded->device_memory());
  LlamaModel model(preset_config("tiny"), *guarded, tracker, 1, 8);
  EXPECT_GT(tracker.current(MemCategory::kActivations), 0u);
}

}  // namespace
}  // namespace zt

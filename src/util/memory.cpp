#include "util/memory.h"

#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace zt {

bool is_device_pool(MemCategory c) {
  return c != MemCategory::kHostOffload && c != MemCategory::kNvme;
}

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParams:
      return "params";
    case MemCategory::kGrads:
      return "grads";
    case MemCategory::kOptimizer:
      return "optimizer";
    case MemCategory::kActivations:
      return "activations";
    case MemCategory::kCommBuffers:
      return "buffers";
    case MemCategory::kHostOffload:
      return "host";
    case MemCategory::kNvme:
      return "nvme";
    default:
      return "?";
  }
}

namespace {

class HostDeviceMemory final : public DeviceMemory {
 public:
  void* allocate(size_t bytes, MemCategory) override { return aligned_zeroed_alloc(bytes); }
  void release(void* p, size_t) override { aligned_free(p); }
  void to_device(void* device, const void* host, size_t bytes) override {
    if (bytes) std::memcpy(device, host, bytes);
  }
  void to_host(void* host, const void* device, size_t bytes) override {
    if (bytes) std::memcpy(host, device, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void zero(void* device, size_t bytes) override {
    if (bytes) std::memset(device, 0, bytes);
  }
  bool host_accessible() const override { return true; }
};

}  // namespace

DeviceMemory& host_device_memory() {
  static HostDeviceMemory memory;
  return memory;
}

void MemoryTracker::on_alloc(MemCategory c, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t in_use = held_outside_ + current_total_;
  if (device_limit_ > 0 && is_device_pool(c) && in_use + bytes > device_limit_) {
    std::string held;
    for (int k = 0; k < kNumMemCategories; ++k)
      if (is_device_pool(static_cast<MemCategory>(k)) && current_[k] > 0)
        held += std::string(held.empty() ? "" : ", ") +
                mem_category_name(static_cast<MemCategory>(k)) + " " + std::to_string(current_[k]);
    if (held_outside_ > 0)
      held += std::string(held.empty() ? "" : ", ") + "backend scratch " +
              std::to_string(held_outside_);
    fail("device memory limit (train --device-memory-limit) of " + std::to_string(device_limit_) +
         " bytes reached: " + std::to_string(bytes) + " more bytes of " + mem_category_name(c) +
         " do not fit, " + std::to_string(in_use) + " in use (" +
         (held.empty() ? "nothing" : held) + "); short by " +
         std::to_string(in_use + bytes - device_limit_) + " bytes");
  }
  const int i = static_cast<int>(c);
  current_[i] += bytes;
  if (current_[i] > peak_[i]) peak_[i] = current_[i];
  if (is_device_pool(c)) {
    current_total_ += bytes;
    if (current_total_ > peak_total_) peak_total_ = current_total_;
  }
}

void MemoryTracker::on_free(MemCategory c, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  current_[static_cast<int>(c)] -= bytes;
  if (is_device_pool(c)) current_total_ -= bytes;
}

void MemoryTracker::set_device_limit(size_t bytes, size_t held_outside) {
  std::lock_guard<std::mutex> lock(mu_);
  device_limit_ = bytes;
  held_outside_ = held_outside;
}

size_t MemoryTracker::device_limit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_limit_;
}

size_t MemoryTracker::current(MemCategory c) const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_[static_cast<int>(c)];
}

size_t MemoryTracker::peak(MemCategory c) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_[static_cast<int>(c)];
}

size_t MemoryTracker::peak_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_total_;
}

void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = current_;
  peak_total_ = current_total_;
}

void* aligned_zeroed_alloc(size_t bytes) {
  if (bytes == 0) bytes = 64;
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  ZT_CHECK(p != nullptr, "out of host memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  return p;
}

void aligned_free(void* p) {
  std::free(p);
}

}  // namespace zt

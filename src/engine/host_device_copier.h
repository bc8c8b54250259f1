// Copies between the device pool and the host pool for offloading. BlockingHostDeviceCopier
// copies through the backend's DeviceMemory and returns when done (a memcpy on the CPU backend);
// a CUDA copier implements the same interface with cudaMemcpyAsync on a copy stream plus events,
// and `synchronize` waits on them. Callers enqueue copies where a GPU would overlap them and
// synchronize before using the data.
#pragma once
#include <cstddef>
#include <cstdint>

#include "util/memory.h"

namespace zt {

class HostDeviceCopier {
 public:
  virtual ~HostDeviceCopier() = default;
  // Enqueue a copy; the destination is valid after synchronize().
  virtual void device_to_host(void* host, const void* device, size_t bytes) = 0;
  virtual void host_to_device(void* device, const void* host, size_t bytes) = 0;
  // Waits for every enqueued copy.
  virtual void synchronize() = 0;

  uint64_t device_to_host_bytes() const { return d2h_bytes_; }
  uint64_t host_to_device_bytes() const { return h2d_bytes_; }

 protected:
  uint64_t d2h_bytes_ = 0, h2d_bytes_ = 0;
};

class BlockingHostDeviceCopier final : public HostDeviceCopier {
 public:
  explicit BlockingHostDeviceCopier(DeviceMemory& memory) : memory_(memory) {}
  void device_to_host(void* host, const void* device, size_t bytes) override {
    memory_.to_host(host, device, bytes);
    d2h_bytes_ += bytes;
  }
  void host_to_device(void* device, const void* host, size_t bytes) override {
    memory_.to_device(device, host, bytes);
    h2d_bytes_ += bytes;
  }
  void synchronize() override {}

 private:
  DeviceMemory& memory_;
};

}  // namespace zt

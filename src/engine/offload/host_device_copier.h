// Copies between the device pool and the host pool for offloading, counted. DeviceMemoryCopier
// issues them as the backend DeviceMemory's asynchronous copies (a memcpy on the CPU backend,
// cudaMemcpyAsync on a copy stream on the CUDA one) and `synchronize` waits for them. Callers
// enqueue copies where a GPU would overlap them and synchronize before using the data.
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
  // A mark after the copies enqueued so far, and a wait for those only.
  virtual uint64_t mark() = 0;
  virtual void synchronize_until(uint64_t mark) = 0;
  // Whether the copies before `mark` are done, without waiting.
  virtual bool done_until(uint64_t mark) = 0;
  // The device work queued after this call starts after the copies before `mark`; the host does
  // not wait (a GPU's compute stream waits for the copy stream's event).
  virtual void order_device_after(uint64_t mark) = 0;

  uint64_t device_to_host_bytes() const { return d2h_bytes_; }
  uint64_t host_to_device_bytes() const { return h2d_bytes_; }

 protected:
  uint64_t d2h_bytes_ = 0, h2d_bytes_ = 0;
};

class DeviceMemoryCopier final : public HostDeviceCopier {
 public:
  explicit DeviceMemoryCopier(DeviceMemory& memory) : memory_(memory) {}
  void device_to_host(void* host, const void* device, size_t bytes) override {
    memory_.to_host_async(host, device, bytes);
    d2h_bytes_ += bytes;
  }
  void host_to_device(void* device, const void* host, size_t bytes) override {
    memory_.to_device_async(device, host, bytes);
    h2d_bytes_ += bytes;
  }
  void synchronize() override { memory_.wait_copies(); }
  uint64_t mark() override { return memory_.mark_copies(); }
  void synchronize_until(uint64_t mark) override { memory_.wait_copies_until(mark); }
  bool done_until(uint64_t mark) override { return memory_.copies_done_until(mark); }
  void order_device_after(uint64_t mark) override { memory_.order_compute_after_copies(mark); }

 private:
  DeviceMemory& memory_;
};

}  // namespace zt

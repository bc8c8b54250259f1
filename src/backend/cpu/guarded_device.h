// Guarded device memory: the CPU backend with device memory that host code cannot touch, so CI
// (no GPU) can prove the engine reaches device memory only the ways a GPU allows.
//
// Every device-pool buffer is its own mmap'd region, kept PROT_NONE except while a Backend op,
// a collective or a DeviceMemory copy runs (an access scope). A host read or write of device
// memory anywhere else is a SIGSEGV. On top of that:
//   * the guarded backend refuses a tensor argument that is not device memory (a GPU kernel
//     cannot read a host pointer);
//   * the guarded communicator refuses host buffers (NCCL cannot either): host scalars go
//     through the engine's host communicator.
// The arithmetic is the wrapped backend's and the transport the wrapped communicator's, so a
// guarded run must give bitwise the same losses and weights as a plain one (tests check it).
// Single-threaded use (the engine's thread); OpenMP inside backend ops is fine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "util/memory.h"

namespace zt {

class GuardedDeviceMemory final : public DeviceMemory {
 public:
  GuardedDeviceMemory() = default;
  ~GuardedDeviceMemory() override;
  GuardedDeviceMemory(const GuardedDeviceMemory&) = delete;
  GuardedDeviceMemory& operator=(const GuardedDeviceMemory&) = delete;

  void* allocate(size_t bytes, MemCategory category) override;
  void release(void* p, size_t bytes) override;
  void to_device(void* device, const void* host, size_t bytes) override;
  void to_host(void* host, const void* device, size_t bytes) override;
  void copy(void* device_dst, const void* device_src, size_t bytes) override;
  void zero(void* device, size_t bytes) override;
  bool host_accessible() const override { return false; }

  // Whether [p, p+bytes) lies inside one live device buffer.
  bool contains(const void* p, size_t bytes) const;
  // Throws zt::Error naming `what` unless p is null or contains(p, bytes).
  void require_device(const void* p, size_t bytes, const char* what) const;
  size_t live_buffers() const { return regions_.size(); }

  // While one is alive, device memory is readable and writable.
  class Access {
   public:
    explicit Access(GuardedDeviceMemory& memory) : memory_(memory) { memory_.open(); }
    ~Access() { memory_.close(); }
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;

   private:
    GuardedDeviceMemory& memory_;
  };

 private:
  void open();
  void close();
  void protect_all(int prot);

  std::map<uintptr_t, size_t> regions_;  // start → mapped bytes
  int depth_ = 0;
};

// `inner`'s arithmetic over `memory`'s buffers; every op checks its tensor arguments are device
// memory and runs inside an access scope.
std::unique_ptr<Backend> make_guarded_backend(Backend& inner, GuardedDeviceMemory& memory);

// `inner`'s collectives on device buffers only; issuing and polling run inside an access scope.
std::unique_ptr<Communicator> make_guarded_communicator(Communicator& inner,
                                                        GuardedDeviceMemory& memory);

}  // namespace zt

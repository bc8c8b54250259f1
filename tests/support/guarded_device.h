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
//   * a buffer of a collective in flight (issued, neither waited on the host nor ordered with
//     Communicator::device_wait) may not be touched by a backend op, a copy or another
//     collective, nor released: on a GPU that is a race between the comm and compute streams.
//     device_wait is modelled as a stream would see it: the "device" here is the host thread, so
//     the wait completes the collective before any later op runs, and the handle stays pending
//     for the host until Communicator::finish_device_waits().
//   * asynchronous copies (to_host_async / to_device_async) are deferred to the wait that covers
//     them, the latest moment a copy stream could run them.
// The arithmetic is the wrapped backend's and the transport the wrapped communicator's, so a
// guarded run must give bitwise the same losses and weights as a plain one (tests check it).
// Single-threaded use (the engine's thread); OpenMP inside backend ops is fine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

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
  // Asynchronous copies run as late as a copy stream may run them: at the wait that covers
  // them. Rewriting a copy's source, or reading its destination, before that wait then gives
  // wrong numbers (the guarded tests compare bitwise), as it races on a GPU.
  void to_host_async(void* host, const void* device, size_t bytes) override;
  void to_device_async(void* device, const void* host, size_t bytes) override;
  void wait_copies() override;
  uint64_t mark_copies() override { return copies_issued_; }
  void wait_copies_until(uint64_t mark) override;
  size_t pending_copies() const { return pending_copies_.size(); }

  // Recording (Backend::capture, as a CUDA stream capture records): between begin_recording and
  // end_recording, the backend's ops, copy and zero are appended to `ops` instead of run; a host
  // copy, an allocation, a release or a wait throws zt::Error naming it, as a capture refuses
  // one. Nothing recorded reads its arguments again: a replay runs every op as it was issued.
  void begin_recording(std::vector<std::function<void()>>* ops) {
    recording_ = ops;
    const int made = recordings_made_++;
    refusing_ = recordings_allowed_ >= 0 && made >= recordings_allowed_ &&
                (refused_count_ < 0 || made < recordings_allowed_ + refused_count_);
  }
  void end_recording() { recording_ = nullptr; }
  bool recording() const { return recording_ != nullptr; }
  // Runs `op` in an access scope now, or records it to run in one at each replay.
  void issue(std::function<void()> op);
  void refuse_while_recording(const char* what) const;
  // A test's: the `count` recordings after the first `allowed` fail at their first op (count -1:
  // every one after them; allowed -1: none fails).
  void refuse_recordings_after(int allowed, int count = -1) {
    recordings_allowed_ = allowed;
    refused_count_ = count;
  }
  // The count Backend::own_buffers_moved reports; a test moves "a buffer of the backend's own".
  void move_own_buffer() { ++own_buffer_moves_; }
  uint64_t own_buffer_moves() const { return own_buffer_moves_; }

  // Whether [p, p+bytes) lies inside one live device buffer.
  bool contains(const void* p, size_t bytes) const;
  // Throws zt::Error naming `what` unless p is null, or contains(p, bytes) and no collective in
  // flight uses any of those bytes.
  void require_device(const void* p, size_t bytes, const char* what) const;
  // Marks [p, p+bytes) as a buffer of the collective `what` in flight; end_in_flight(token)
  // when it has completed.
  uint64_t begin_in_flight(const void* p, size_t bytes, std::string what);
  void end_in_flight(uint64_t token);
  size_t in_flight_buffers() const { return in_flight_.size(); }
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

  struct InFlight {
    uintptr_t begin = 0, end = 0;
    std::string what;
  };
  const InFlight* in_flight_overlap(const void* p, size_t bytes) const;

  std::map<uintptr_t, size_t> regions_;  // start → mapped bytes
  std::map<uint64_t, InFlight> in_flight_;
  struct PendingCopy {
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    uint64_t sequence = 0;
  };
  std::deque<PendingCopy> pending_copies_;
  uint64_t copies_issued_ = 0;
  std::vector<std::function<void()>>* recording_ = nullptr;
  uint64_t own_buffer_moves_ = 0;
  int recordings_allowed_ = -1, recordings_made_ = 0, refused_count_ = -1;
  bool refusing_ = false;  // the recording under way is refused
  uint64_t next_token_ = 1;
  int depth_ = 0;
};

// `inner`'s arithmetic over `memory`'s buffers; every op checks its tensor arguments are device
// memory and runs inside an access scope.
std::unique_ptr<Backend> make_guarded_backend(Backend& inner, GuardedDeviceMemory& memory);

// `inner`'s collectives on device buffers only; issuing and polling run inside an access scope.
std::unique_ptr<Communicator> make_guarded_communicator(Communicator& inner,
                                                        GuardedDeviceMemory& memory);

}  // namespace zt

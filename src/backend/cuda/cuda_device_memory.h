// CudaDeviceMemory: the engine's device memory (util/memory.h DeviceMemory) on one GPU.
//
// Allocation: one cudaMalloc'd arena per MemCategory, reserved up front from the memory estimate
// (reserve(), app/engine_device.cpp), sub-allocated first-fit with merging on release
// (FreeListRegion, device_arena_plan.h). A category without an arena, or one whose arena has no
// free range large enough, falls back to a plain cudaMalloc, counted and reported once on stderr
// with the category, so a low estimate costs speed, never the run. An allocation the GPU cannot
// hold is a zt::Error naming the category, the bytes and the device's free memory. No managed
// memory.
//
// Ordering: allocations are zero-filled and every copy/memset is issued on the backend's stream,
// after the kernels queued before it. to_host waits for its copy; to_device waits too, so the host
// source may be reused at once. A block released while kernels that use it are still queued may be
// handed out again at once: its next user's work runs later on the same stream. (Other streams —
// NCCL's — finish with a buffer before the engine releases it: it waits on their handles first.)
//
// Offload copies (to_host_async / to_device_async) run on a copy stream of their own, after an
// event recorded on the backend's stream (so after the kernels that produce or still read the
// device bytes); wait_copies() synchronises the copy stream, wait_copies_until(mark) an event
// recorded on it by mark_copies(). Host-pool buffers are pinned
// (cudaHostAlloc), so those copies are truly asynchronous DMA.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/device_arena_plan.h"
#include "util/memory.h"

namespace zt::cuda {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  // `stream`: the cudaStream_t every copy and memset is issued on.
  explicit CudaDeviceMemory(void* stream);
  ~CudaDeviceMemory() override;
  CudaDeviceMemory(const CudaDeviceMemory&) = delete;
  CudaDeviceMemory& operator=(const CudaDeviceMemory&) = delete;

  // One cudaMalloc of `bytes` for `category` (once per category, before its first allocation).
  // False, reserving nothing, when the GPU cannot hold it: the category then takes cudaMalloc per
  // allocation (the estimate the arenas are sized from is an upper bound of the run's peak).
  bool reserve(MemCategory category, size_t bytes);
  // Frees every arena (none may hold a live block): each category then takes cudaMalloc per
  // allocation. For a GPU that cannot hold all the planned arenas, whose unused slack would
  // otherwise crowd out the categories left without one.
  void release_arenas();
  size_t reserved(MemCategory category) const;

  void* allocate(size_t bytes, MemCategory category) override;
  void release(void* p, size_t bytes) override;
  void to_device(void* device, const void* host, size_t bytes) override;
  void to_host(void* host, const void* device, size_t bytes) override;
  void copy(void* device_dst, const void* device_src, size_t bytes) override;
  void zero(void* device, size_t bytes) override;
  bool host_accessible() const override { return false; }
  void* allocate_host(size_t bytes) override;
  void release_host(void* p, size_t bytes) override;
  // On the compute stream, not waited for (cpu_checkpointing's activation copies).
  void to_host_queued(void* host, const void* device, size_t bytes) override;
  void to_device_queued(void* device, const void* host, size_t bytes) override;
  void to_host_async(void* host, const void* device, size_t bytes) override;
  void to_device_async(void* device, const void* host, size_t bytes) override;
  void wait_copies() override;
  uint64_t mark_copies() override;
  void wait_copies_until(uint64_t mark) override;
  // cudaEventQuery on the marks up to `mark`: the completed ones are retired as a wait would.
  bool copies_done_until(uint64_t mark) override;
  // cudaStreamWaitEvent of the compute stream on the newest mark up to `mark` still held.
  void order_compute_after_copies(uint64_t mark) override;

 private:
  struct Arena {
    char* base = nullptr;
    std::unique_ptr<FreeListRegion> region;
  };
  static constexpr int kFallback = -1;

  void* after_compute();  // the copy stream, made to wait for the work queued on stream_
  // The error of an allocation of `bytes` for `category` that the GPU cannot hold.
  std::string out_of_memory(size_t bytes, MemCategory category) const;
  // Throws naming `what` while the stream is being recorded (Backend::capture): a replay would
  // use an address that was not reserved for it. (allocate's; a release is a destructor's.)
  void refuse_while_recorded(const char* what) const;

  void* stream_;
  void* copy_stream_ = nullptr;                   // cudaStream_t
  std::deque<std::pair<uint64_t, void*>> marks_;  // mark → cudaEvent_t recorded on copy_stream_
  std::vector<void*> spare_events_;
  uint64_t next_mark_ = 1;
  void* compute_done_ = nullptr;  // cudaEvent_t
  std::array<Arena, kNumMemCategories> arenas_{};
  std::unordered_map<void*, int> owner_;  // live block → arena index, or kFallback
  size_t fallback_bytes_ = 0;             // held by live kFallback blocks
  bool warned_ = false;
};

}  // namespace zt::cuda

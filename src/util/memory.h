// Tracked memory: every long-lived buffer is allocated through a MemoryTracker with a category,
// so each run can report current and peak bytes per category per rank (and compare them with the
// estimator). Pools are separate: the "device" pool (GPU memory, or the CPU backend's stand-in
// for it), the "host" pool (pinned/offloaded host memory, CPU checkpointed activations) and the
// "nvme" pool (bytes of ZeRO-Infinity swap files). Only the device pool counts in peak_total().
//
// Device-pool buffers are allocated by the tracker's DeviceMemory: plain host memory for the CPU
// backend, GPU memory for the CUDA backend. Host code must therefore never dereference a
// device-pool pointer; it moves bytes with DeviceMemory's copies (to_host / to_device), and only
// Backend ops, communicators and copiers read or write device memory.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace zt {

enum class MemCategory : int {
  kParams = 0,   // working (bf16/fp32) parameters, gathered layers included
  kGrads,        // fp32 gradient accumulators (full or sharded)
  kOptimizer,    // fp32 master weights and Adam moments
  kActivations,  // activation arena
  kCommBuffers,  // buckets, gather/scatter staging, compute scratch
  kHostOffload,  // host-pool: offloaded optimizer state / params / checkpointed activations
  kNvme,         // nvme-pool: swap-file bytes of optimizer state offloaded to NVMe
  kCount
};
constexpr int kNumMemCategories = static_cast<int>(MemCategory::kCount);
const char* mem_category_name(MemCategory c);
bool is_device_pool(MemCategory c);  // false for the host and nvme pools

void* aligned_zeroed_alloc(size_t bytes);  // throws zt::Error on failure
void aligned_free(void* p);

// Where device-pool buffers live and how host code reaches them. Copies are ordered after every
// operation issued before them on the owning backend (its stream): to_host returns with the
// bytes on the host; to_device returns when the host source may be reused.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Zero-filled, 64-byte aligned; throws on failure. `category` lets a device keep one arena per
  // category.
  virtual void* allocate(size_t bytes, MemCategory category) = 0;
  virtual void release(void* p, size_t bytes) = 0;
  virtual void to_device(void* device, const void* host, size_t bytes) = 0;
  virtual void to_host(void* host, const void* device, size_t bytes) = 0;
  virtual void copy(void* device_dst, const void* device_src, size_t bytes) = 0;
  virtual void zero(void* device, size_t bytes) = 0;
  // True when device memory is ordinary host memory that host code may also read directly.
  virtual bool host_accessible() const = 0;

  // Host-pool buffers, in memory the device copies fastest (pinned on a GPU); zero-filled.
  virtual void* allocate_host(size_t bytes) { return aligned_zeroed_alloc(bytes); }
  virtual void release_host(void* p, size_t /*bytes*/) { aligned_free(p); }
  // Copies on a queue of their own (a GPU's copy stream), ordered after every op issued before
  // them; both buffers belong to the copy until wait_copies() returns. Host buffers should come
  // from allocate_host. Default: the synchronous copies above.
  virtual void to_host_async(void* host, const void* device, size_t bytes) {
    to_host(host, device, bytes);
  }
  virtual void to_device_async(void* device, const void* host, size_t bytes) {
    to_device(device, host, bytes);
  }
  virtual void wait_copies() {}
  // Copies queued with the backend's ops (a GPU's compute stream) that the host does not wait
  // for: later ops and queued copies see them in order. The host buffer (from allocate_host)
  // belongs to the queue until the backend's next synchronize(). Default: the synchronous
  // copies, which a synchronous backend's order already gives.
  virtual void to_host_queued(void* host, const void* device, size_t bytes) {
    to_host(host, device, bytes);
  }
  virtual void to_device_queued(void* device, const void* host, size_t bytes) {
    to_device(device, host, bytes);
  }
  // A mark after the asynchronous copies issued so far; wait_copies_until(mark) waits for those
  // only (later copies may still run). Default: marks mean "everything".
  virtual uint64_t mark_copies() { return 0; }
  virtual void wait_copies_until(uint64_t /*mark*/) { wait_copies(); }
  // Whether the copies before `mark` are done, without waiting where the copies run on their own
  // (the CUDA copy stream polls its events). Default: completes them (wait_copies_until), so that
  // a subclass that defers its asynchronous copies is never reported done too early.
  virtual bool copies_done_until(uint64_t mark) {
    wait_copies_until(mark);
    return true;
  }
  // The device work queued after this call (the backend's ops: a GPU's compute stream) starts
  // after the copies before `mark`, without the host waiting for them. Default:
  // wait_copies_until, which a synchronous backend's copies have already satisfied.
  virtual void order_compute_after_copies(uint64_t mark) { wait_copies_until(mark); }
};
// The CPU backend's device memory: aligned host allocations and memcpy.
DeviceMemory& host_device_memory();

class MemoryTracker {
 public:
  // `device`: where device-pool buffers are allocated — the backend's device memory (the CPU
  // backend's is host_device_memory()). Fixed for the tracker's life.
  explicit MemoryTracker(DeviceMemory& device = host_device_memory()) : device_(&device) {}
  DeviceMemory& device_memory() const { return *device_; }

  // Counts an allocation. With a device limit set, a device-pool allocation that would take the
  // pool's current total past it throws zt::Error naming the category, the bytes and what is in
  // use, and counts nothing.
  void on_alloc(MemCategory c, size_t bytes);
  void on_free(MemCategory c, size_t bytes);
  // `train --device-memory-limit`: the most device bytes per rank (0: no limit), of which
  // `held_outside` are already taken by allocations this tracker does not count (the backend's
  // scratch); the device-pool categories may use the rest.
  void set_device_limit(size_t bytes, size_t held_outside = 0);
  size_t device_limit() const;
  size_t current(MemCategory c) const;
  size_t peak(MemCategory c) const;
  size_t peak_total() const;  // peak of the sum over the device-pool categories
  void reset_peaks();         // peaks := current
 private:
  mutable std::mutex mu_;
  DeviceMemory* device_;
  std::array<size_t, kNumMemCategories> current_{};
  std::array<size_t, kNumMemCategories> peak_{};
  size_t current_total_ = 0;
  size_t peak_total_ = 0;
  size_t device_limit_ = 0;
  size_t held_outside_ = 0;
};

// A tracked, 64-byte-aligned buffer of T (move-only), zero-initialised, from the tracker's
// DeviceMemory: device memory for a device-pool category, its host memory for the host pool.
template <typename T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  // from: the memory that allocates it (default: the tracker's). A host-pool buffer that no
  // device copy touches can take host_device_memory()'s plain pageable memory instead of a GPU
  // backend's pinned host memory.
  TrackedBuffer(MemoryTracker& tracker, MemCategory cat, size_t count,
                DeviceMemory* from = nullptr);
  ~TrackedBuffer() { reset(); }
  TrackedBuffer(TrackedBuffer&& o) noexcept { *this = std::move(o); }
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept;
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  void reset();

 private:
  MemoryTracker* tracker_ = nullptr;
  DeviceMemory* memory_ = nullptr;  // allocate (device pool) or allocate_host (host pool)
  MemCategory cat_ = MemCategory::kParams;
  T* data_ = nullptr;
  size_t count_ = 0;
};

template <typename T>
TrackedBuffer<T>::TrackedBuffer(MemoryTracker& tracker, MemCategory cat, size_t count,
                                DeviceMemory* from)
    : tracker_(&tracker), cat_(cat), count_(count) {
  memory_ = from ? from : &tracker.device_memory();
  tracker_->on_alloc(cat_, count * sizeof(T));  // counted first: a device limit refuses here
  try {
    data_ = static_cast<T*>(is_device_pool(cat) ? memory_->allocate(count * sizeof(T), cat)
                                                : memory_->allocate_host(count * sizeof(T)));
  } catch (...) {
    tracker_->on_free(cat_, count * sizeof(T));
    throw;
  }
}

template <typename T>
TrackedBuffer<T>& TrackedBuffer<T>::operator=(TrackedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    tracker_ = o.tracker_;
    memory_ = o.memory_;
    cat_ = o.cat_;
    data_ = o.data_;
    count_ = o.count_;
    o.tracker_ = nullptr;
    o.data_ = nullptr;
    o.count_ = 0;
  }
  return *this;
}

template <typename T>
void TrackedBuffer<T>::reset() {
  if (data_) {
    if (is_device_pool(cat_))
      memory_->release(data_, count_ * sizeof(T));
    else
      memory_->release_host(data_, count_ * sizeof(T));
    if (tracker_) tracker_->on_free(cat_, count_ * sizeof(T));
  }
  data_ = nullptr;
  count_ = 0;
}

}  // namespace zt

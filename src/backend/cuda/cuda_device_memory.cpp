#include "backend/cuda/cuda_device_memory.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt::cuda {

namespace {
cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}
}  // namespace

CudaDeviceMemory::CudaDeviceMemory(void* stream) : stream_(stream) {
  cudaStream_t copy = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  copy_stream_ = copy;
  cudaEvent_t event = nullptr;
  ZT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  compute_done_ = event;
}

CudaDeviceMemory::~CudaDeviceMemory() {
  cudaStreamSynchronize(as_stream(copy_stream_));
  cudaStreamSynchronize(as_stream(stream_));  // queued work may still use the blocks
  cudaEventDestroy(static_cast<cudaEvent_t>(compute_done_));
  for (const auto& [mark, event] : marks_) cudaEventDestroy(static_cast<cudaEvent_t>(event));
  for (void* event : spare_events_) cudaEventDestroy(static_cast<cudaEvent_t>(event));
  cudaStreamDestroy(as_stream(copy_stream_));
  for (const auto& [p, owner] : owner_)
    if (owner == kFallback) cudaFree(p);
  for (Arena& a : arenas_) cudaFree(a.base);
}

bool CudaDeviceMemory::reserve(MemCategory category, size_t bytes) {
  Arena& a = arenas_[static_cast<size_t>(category)];
  ZT_CHECK(a.base == nullptr && a.region == nullptr, std::string("CUDA device memory: category '") +
                                                         mem_category_name(category) +
                                                         "' is already reserved");
  auto region = std::make_unique<FreeListRegion>(mem_category_name(category), bytes);
  if (region->capacity() > 0) {
    void* base = nullptr;
    const cudaError_t status = cudaMalloc(&base, region->capacity());
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky; cleared so that the next check does not report it
      return false;
    }
    check_cuda(status, "cudaMalloc (device arena)", __FILE__, __LINE__);
    a.base = static_cast<char*>(base);
  }
  a.region = std::move(region);
  return true;
}

void CudaDeviceMemory::release_arenas() {
  for (const auto& [p, owner] : owner_)
    ZT_CHECK(owner == kFallback, std::string("CUDA device memory: release_arenas while arena '") +
                                     mem_category_name(static_cast<MemCategory>(owner)) +
                                     "' holds a block");
  for (Arena& a : arenas_) {
    if (a.base != nullptr) ZT_CUDA_CHECK(cudaFree(a.base));
    a = Arena{};
  }
}

size_t CudaDeviceMemory::reserved(MemCategory category) const {
  const Arena& a = arenas_[static_cast<size_t>(category)];
  return a.region ? a.region->capacity() : 0;
}

std::string CudaDeviceMemory::out_of_memory(size_t bytes, MemCategory category) const {
  size_t arenas = 0;
  for (const Arena& a : arenas_)
    if (a.base != nullptr) arenas += a.region->capacity();
  size_t free_bytes = 0, total_bytes = 0;
  std::string device = "the GPU's free memory is unknown", gib = "G";
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    device = "the GPU has " + std::to_string(free_bytes) + " of " + std::to_string(total_bytes) +
             " bytes free";
    gib = std::to_string(total_bytes >> 30);
  } else {
    cudaGetLastError();
  }
  return "CUDA device memory: out of memory: " + std::to_string(bytes) + " more bytes of '" +
         mem_category_name(category) + "' do not fit (" + device + "; this process holds " +
         std::to_string(arenas) + " in its arenas and " + std::to_string(fallback_bytes_) +
         " in other allocations). Lower the run's device peak: `zerotrain estimate "
         "--max-micro-batch --backend cuda --device-memory-gib " +
         gib +
         "` with this run's options gives the largest micro-batch that fits; activation "
         "checkpointing, a higher ZeRO stage and CPU offload lower it too";
}

void CudaDeviceMemory::refuse_while_recorded(const char* what) const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ZT_CUDA_CHECK(cudaStreamIsCapturing(as_stream(stream_), &status));
  if (status != cudaStreamCaptureStatusNone)
    throw Error(std::string("CUDA device memory: ") + what +
                " while the stream is recorded as a CUDA graph (a replay would use its address "
                "after it is gone)");
}

void* CudaDeviceMemory::allocate(size_t bytes, MemCategory category) {
  refuse_while_recorded("an allocation");
  const int index = static_cast<int>(category);
  Arena& a = arenas_[static_cast<size_t>(index)];
  void* p = nullptr;
  int owner = kFallback;
  if (a.base != nullptr) {
    if (const std::optional<size_t> offset = a.region->allocate(bytes)) {
      p = a.base + *offset;
      owner = index;
    }
  }
  if (p == nullptr) {
    if (a.base != nullptr && !warned_) {
      std::fprintf(stderr,
                   "zerotrain: warning: device arena '%s' (%zu bytes, %zu in use) has no room for "
                   "%zu bytes; using cudaMalloc (the memory estimate is low)\n",
                   mem_category_name(category), a.region->capacity(), a.region->used(), bytes);
      warned_ = true;
    }
    const cudaError_t status = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error(out_of_memory(bytes, category));
    }
    check_cuda(status, "cudaMalloc", __FILE__, __LINE__);
    fallback_bytes_ += bytes;
  }
  owner_[p] = owner;
  zero(p, bytes);
  return p;
}

void CudaDeviceMemory::release(void* p, size_t bytes) {
  auto it = owner_.find(p);
  ZT_CHECK(it != owner_.end(), "CUDA device memory: release of an unknown pointer");
  if (it->second == kFallback) {
    ZT_CUDA_CHECK(cudaFree(p));  // synchronises the device
    fallback_bytes_ -= bytes;
  } else {
    Arena& a = arenas_[static_cast<size_t>(it->second)];
    a.region->release(static_cast<size_t>(static_cast<char*>(p) - a.base));
  }
  owner_.erase(it);
}

void CudaDeviceMemory::to_device(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, as_stream(stream_)));
  ZT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
}

void CudaDeviceMemory::to_host(void* host, const void* device, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, as_stream(stream_)));
  ZT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
}

void CudaDeviceMemory::to_device_queued(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, as_stream(stream_)));
}

void CudaDeviceMemory::to_host_queued(void* host, const void* device, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, as_stream(stream_)));
}

void CudaDeviceMemory::copy(void* device_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(
      cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream_)));
}

void CudaDeviceMemory::zero(void* device, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(cudaMemsetAsync(device, 0, bytes, as_stream(stream_)));
}

void* CudaDeviceMemory::allocate_host(size_t bytes) {
  void* p = nullptr;
  ZT_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable));
  std::memset(p, 0, bytes);
  return p;
}

void CudaDeviceMemory::release_host(void* p, size_t) {
  ZT_CUDA_CHECK(cudaFreeHost(p));
}

void* CudaDeviceMemory::after_compute() {
  const auto event = static_cast<cudaEvent_t>(compute_done_);
  ZT_CUDA_CHECK(cudaEventRecord(event, as_stream(stream_)));
  ZT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(copy_stream_), event, 0));
  return copy_stream_;
}

void CudaDeviceMemory::to_host_async(void* host, const void* device, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(
      cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, as_stream(after_compute())));
}

void CudaDeviceMemory::to_device_async(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  ZT_CUDA_CHECK(
      cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, as_stream(after_compute())));
}

void CudaDeviceMemory::wait_copies() {
  ZT_CUDA_CHECK(cudaStreamSynchronize(as_stream(copy_stream_)));
  for (auto& [mark, event] : marks_) spare_events_.push_back(event);
  marks_.clear();
}

uint64_t CudaDeviceMemory::mark_copies() {
  cudaEvent_t event = nullptr;
  if (spare_events_.empty()) {
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  } else {
    event = static_cast<cudaEvent_t>(spare_events_.back());
    spare_events_.pop_back();
  }
  ZT_CUDA_CHECK(cudaEventRecord(event, as_stream(copy_stream_)));
  marks_.emplace_back(next_mark_, event);
  return next_mark_++;
}

void CudaDeviceMemory::wait_copies_until(uint64_t mark) {
  // Marks are recorded in order on one stream: waiting for `mark` completes every earlier one.
  while (!marks_.empty() && marks_.front().first <= mark) {
    const auto event = static_cast<cudaEvent_t>(marks_.front().second);
    ZT_CUDA_CHECK(cudaEventSynchronize(event));
    spare_events_.push_back(event);
    marks_.pop_front();
  }
}

void CudaDeviceMemory::order_compute_after_copies(uint64_t mark) {
  // Marks are recorded in order on one stream: the newest one up to `mark` covers the earlier
  // ones, and a mark no longer held was waited for already (its copies are done).
  void* newest = nullptr;
  for (const auto& [held, event] : marks_) {
    if (held > mark) break;
    newest = event;
  }
  if (newest)
    ZT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream_), static_cast<cudaEvent_t>(newest), 0));
}

bool CudaDeviceMemory::copies_done_until(uint64_t mark) {
  while (!marks_.empty() && marks_.front().first <= mark) {
    const auto event = static_cast<cudaEvent_t>(marks_.front().second);
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) return false;
    ZT_CUDA_CHECK(status);
    spare_events_.push_back(event);
    marks_.pop_front();
  }
  return true;
}

}  // namespace zt::cuda

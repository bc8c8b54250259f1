#include "backend/cuda/cupti_kernel_profiler.h"

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/cuda/cuda_check.h"
#include "util/cuda/runtime_library.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

// CUPTI is loaded when a profile is asked for, not linked: zerotrain starts on a host whose CUDA
// install has no CUPTI (a runtime-only image), and only --profile-steps needs it.
struct CuptiApi {
  decltype(&cuptiGetVersion) get_version = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;
};
CuptiApi g_cupti;

// The library of the CUDA major this build targets (its records have this header's layout).
const CuptiApi& load_cupti() {
  if (g_cupti.get_version) return g_cupti;
  const RuntimeLibrary lib(
      "libcupti.so." + std::to_string(CUDART_VERSION / 1000), "--profile-steps",
      "CUPTI ships with the CUDA toolkit (lib64, or extras/CUPTI/lib64) and in "
      "PyPI's nvidia-cuda-cupti wheels; add its folder to LD_LIBRARY_PATH");
  const std::string& soname = lib.soname();
  CuptiApi api;
  lib.bind(api.get_version, "cuptiGetVersion");
  lib.bind(api.result_string, "cuptiGetResultString");
  lib.bind(api.register_callbacks, "cuptiActivityRegisterCallbacks");
  lib.bind(api.enable, "cuptiActivityEnable");
  lib.bind(api.disable, "cuptiActivityDisable");
  lib.bind(api.flush_all, "cuptiActivityFlushAll");
  lib.bind(api.next_record, "cuptiActivityGetNextRecord");
  lib.bind(api.dropped_records, "cuptiActivityGetNumDroppedRecords");
  lib.bind(api.timestamp, "cuptiGetTimestamp");
  uint32_t version = 0;
  ZT_CHECK(api.get_version(&version) == CUPTI_SUCCESS,
           "--profile-steps: cuptiGetVersion failed in " + soname);
  // From CUDA 13 the API version is major·10000 + minor (130001); before, a plain counter that
  // only grows (CUDA 12.x: 18 to 28). Same major, or not older than the header.
  const bool same_major =
      CUPTI_API_VERSION >= 130000 && version / 10000 == CUPTI_API_VERSION / 10000;
  ZT_CHECK(same_major || version >= CUPTI_API_VERSION,
           "--profile-steps: " + soname + " has CUPTI API version " + std::to_string(version) +
               ", which does not match the " + std::to_string(CUPTI_API_VERSION) +
               " zerotrain was built with");
  g_cupti = api;
  return g_cupti;
}

void check_cupti(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  g_cupti.result_string(r, &text);
  fail(std::string("CUPTI: ") + what + " failed: " + (text ? text : "unknown error") +
       " (is another profiler, such as nsys or ncu, attached?)");
}

std::string demangled(const char* name) {
  if (name == nullptr) return "(unnamed kernel)";
  int status = 0;
  char* plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && plain ? plain : name;
  std::free(plain);
  return out;
}

const char* copy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "memcpy PtoP";
    default:
      return "memcpy";
  }
}

// The records CUPTI hands back, gathered under a lock: CUPTI may complete a buffer on its own
// thread. Kernel names are demangled once per name (CUPTI keeps each name's string alive).
struct Collected {
  std::mutex lock;
  std::vector<DeviceActivity> activities;
  std::unordered_map<const char*, std::string> names;
  int64_t dropped = 0, untimed = 0;
};
Collected g_collected;
std::atomic<bool> g_in_use{false};

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kBufferAlignment = 8;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// Appends one record to g_collected (its lock held); other kinds are ignored. A kernel CUPTI
// could not time (start or end 0, which its header allows when it runs short of device memory)
// is counted, not kept.
void collect(const CUpti_Activity* record) {
  DeviceActivity a;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      if (k->start == 0 || k->end < k->start) {
        g_collected.untimed += 1;
        return;
      }
      a.kind = DeviceActivity::Kind::kKernel;
      auto [name, fresh] = g_collected.names.try_emplace(k->name);
      if (fresh) name->second = demangled(k->name);
      a.name = name->second;
      a.start_ns = k->start;
      a.end_ns = k->end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      a.kind = DeviceActivity::Kind::kCopy;
      a.name = copy_name(m->copyKind);
      a.start_ns = m->start;
      a.end_ns = m->end;
      a.bytes = static_cast<int64_t>(m->bytes);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      a.kind = DeviceActivity::Kind::kMemset;
      a.name = "memset";
      a.start_ns = m->start;
      a.end_ns = m->end;
      a.bytes = static_cast<int64_t>(m->bytes);
      break;
    }
    default:
      return;
  }
  g_collected.activities.push_back(std::move(a));
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  {
    std::lock_guard<std::mutex> hold(g_collected.lock);
    CUpti_Activity* record = nullptr;
    while (g_cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) collect(record);
    size_t dropped = 0;
    if (g_cupti.dropped_records(context, stream, &dropped) == CUPTI_SUCCESS)
      g_collected.dropped += static_cast<int64_t>(dropped);
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

class CuptiKernelProfiler final : public KernelProfiler {
 public:
  CuptiKernelProfiler() {
    load_cupti();
    ZT_CHECK(!g_in_use.exchange(true), "CUPTI: one kernel profiler per process at a time");
  }
  ~CuptiKernelProfiler() override {
    if (recording_) quiet_stop();
    g_in_use = false;
  }

  void start() override {
    ZT_CHECK(!recording_, "kernel profiler: start() while recording");
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    {
      std::lock_guard<std::mutex> hold(g_collected.lock);
      g_collected.activities.clear();
      g_collected.dropped = g_collected.untimed = 0;
    }
    // Set first: whatever a failure below leaves enabled is disabled again.
    recording_ = true;
    try {
      check_cupti(g_cupti.register_callbacks(buffer_requested, buffer_completed),
                  "cuptiActivityRegisterCallbacks");
      for (CUpti_ActivityKind kind : kKinds)
        check_cupti(g_cupti.enable(kind), "cuptiActivityEnable");
    } catch (...) {
      quiet_stop();
      throw;
    }
  }

  uint64_t now() override {
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    uint64_t t = 0;
    check_cupti(g_cupti.timestamp(&t), "cuptiGetTimestamp");
    return t;
  }

  Recording stop() override {
    ZT_CHECK(recording_, "kernel profiler: stop() without start()");
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    recording_ = false;
    for (CUpti_ActivityKind kind : kKinds)
      check_cupti(g_cupti.disable(kind), "cuptiActivityDisable");
    check_cupti(g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    Recording r;
    std::lock_guard<std::mutex> hold(g_collected.lock);
    // Records lost in the global queue (a buffer CUPTI could not get) show only here.
    size_t dropped = 0;
    if (g_cupti.dropped_records(nullptr, 0, &dropped) == CUPTI_SUCCESS)
      g_collected.dropped += static_cast<int64_t>(dropped);
    r.activities = std::move(g_collected.activities);
    r.dropped_records = g_collected.dropped;
    r.untimed_records = g_collected.untimed;
    g_collected.activities.clear();
    return r;
  }

  void discard() override {
    ZT_CHECK(recording_, "kernel profiler: discard() without start()");
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    check_cupti(g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    size_t dropped = 0;  // read to reset: the count stop() reads starts here
    g_cupti.dropped_records(nullptr, 0, &dropped);
    std::lock_guard<std::mutex> hold(g_collected.lock);
    g_collected.activities.clear();
    g_collected.dropped = g_collected.untimed = 0;
  }

 private:
  // Disables every kind and drops what was recorded, errors ignored (the destructor's and a
  // failed start's cleanup).
  void quiet_stop() {
    for (CUpti_ActivityKind kind : kKinds) g_cupti.disable(kind);
    g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> hold(g_collected.lock);
    g_collected.activities.clear();
    recording_ = false;
  }

  bool recording_ = false;
};

}  // namespace

std::unique_ptr<KernelProfiler> make_cupti_kernel_profiler() {
  return std::make_unique<CuptiKernelProfiler>();
}

}  // namespace zt::cuda

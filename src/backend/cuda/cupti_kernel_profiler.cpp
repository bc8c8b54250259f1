#include "backend/cuda/cupti_kernel_profiler.h"

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "util/cuda/cuda_check.h"
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
  const std::string soname = "libcupti.so." + std::to_string(CUDART_VERSION / 1000);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    fail("--profile-steps: cannot load " + soname + " (" + (why ? why : "not found") +
         "): CUPTI ships with the CUDA toolkit (lib64, or extras/CUPTI/lib64) and in PyPI's "
         "nvidia-cuda-cupti wheels; add its folder to LD_LIBRARY_PATH");
  }
  CuptiApi api;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    ZT_CHECK(fn != nullptr, "--profile-steps: " + soname + " has no " + name);
  };
  bind(api.get_version, "cuptiGetVersion");
  bind(api.result_string, "cuptiGetResultString");
  bind(api.register_callbacks, "cuptiActivityRegisterCallbacks");
  bind(api.enable, "cuptiActivityEnable");
  bind(api.disable, "cuptiActivityDisable");
  bind(api.flush_all, "cuptiActivityFlushAll");
  bind(api.next_record, "cuptiActivityGetNextRecord");
  bind(api.dropped_records, "cuptiActivityGetNumDroppedRecords");
  bind(api.timestamp, "cuptiGetTimestamp");
  uint32_t version = 0;
  ZT_CHECK(
      api.get_version(&version) == CUPTI_SUCCESS && version / 10000 == CUPTI_API_VERSION / 10000,
      "--profile-steps: " + soname + " has CUPTI API version " + std::to_string(version) +
          ", another major than the " + std::to_string(CUPTI_API_VERSION) +
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
// thread.
struct Collected {
  std::mutex lock;
  std::vector<DeviceActivity> activities;
  int64_t dropped = 0;
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

DeviceActivity to_activity(const CUpti_Activity* record, bool& known) {
  DeviceActivity a;
  known = true;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      a.kind = DeviceActivity::Kind::kKernel;
      a.name = demangled(k->name);
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
      known = false;
  }
  return a;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
  std::vector<DeviceActivity> parsed;
  CUpti_Activity* record = nullptr;
  while (g_cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    bool known = false;
    DeviceActivity a = to_activity(record, known);
    if (known) parsed.push_back(std::move(a));
  }
  size_t dropped = 0;
  if (g_cupti.dropped_records(context, stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);
  std::lock_guard<std::mutex> hold(g_collected.lock);
  for (DeviceActivity& a : parsed) g_collected.activities.push_back(std::move(a));
  g_collected.dropped += static_cast<int64_t>(dropped);
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
    if (running_) {
      for (CUpti_ActivityKind kind : kKinds) g_cupti.disable(kind);
      g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    g_in_use = false;
  }

  void start() override {
    ZT_CHECK(!running_, "kernel profiler: start() while recording");
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    {
      std::lock_guard<std::mutex> hold(g_collected.lock);
      g_collected.activities.clear();
      g_collected.dropped = 0;
    }
    check_cupti(g_cupti.register_callbacks(buffer_requested, buffer_completed),
                "cuptiActivityRegisterCallbacks");
    for (CUpti_ActivityKind kind : kKinds) check_cupti(g_cupti.enable(kind), "cuptiActivityEnable");
    running_ = true;
    check_cupti(g_cupti.timestamp(&window_start_), "cuptiGetTimestamp");
  }

  Recording stop() override {
    ZT_CHECK(running_, "kernel profiler: stop() without start()");
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    Recording r;
    r.window_start_ns = window_start_;
    check_cupti(g_cupti.timestamp(&r.window_end_ns), "cuptiGetTimestamp");
    for (CUpti_ActivityKind kind : kKinds)
      check_cupti(g_cupti.disable(kind), "cuptiActivityDisable");
    running_ = false;
    check_cupti(g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    std::lock_guard<std::mutex> hold(g_collected.lock);
    r.activities = std::move(g_collected.activities);
    r.dropped_records = g_collected.dropped;
    g_collected.activities.clear();
    return r;
  }

 private:
  bool running_ = false;
  uint64_t window_start_ = 0;
};

}  // namespace

std::unique_ptr<KernelProfiler> make_cupti_kernel_profiler() {
  return std::make_unique<CuptiKernelProfiler>();
}

}  // namespace zt::cuda
